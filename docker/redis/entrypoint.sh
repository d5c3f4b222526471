#!/bin/sh
# `redis-server ARGS`: serve on every interface without protected mode (the network is the
# compose project's own), data in the working directory (/data).
set -eu
if [ "${1:-}" = redis-server ]; then
    shift
    exec redis-server --protected-mode no --dir /data "$@"
fi
exec "$@"
