"""Python SDK for the Kairos scheduling-as-a-service HTTP API."""
