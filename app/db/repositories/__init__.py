"""All database queries live here; services call these and never build SQL themselves."""
