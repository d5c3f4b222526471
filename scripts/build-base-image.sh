#!/usr/bin/env bash
# Builds the images the compose stack runs on from Debian's archive, for machines whose Docker
# engine cannot pull public images (only the Debian archive and PyPI are reachable):
#
#   kairos-debian:SUITE    debootstrap --variant=minbase SUITE + python3, python3-venv, imported
#   kairos-base:SUITE      the above, trusting this host's CA bundle for pip (PIP_CERT)
#   kairos-postgres:SUITE  Debian's postgresql on kairos-base (docker/postgres)
#   kairos-redis:SUITE     Debian's redis-server on kairos-base (docker/redis)
#
# and prints (or writes with --env-file) the variables docker-compose.yml takes its images from:
# KAIROS_BASE_IMAGE, KAIROS_POSTGRES_IMAGE, KAIROS_REDIS_IMAGE.
#
# Usage: scripts/build-base-image.sh [--auto] [--force] [--env-file FILE]
#   --auto        use the public images (python:3.11-slim, postgres:16-alpine, redis:7-alpine)
#                 when the engine can pull them; build the local ones only when it cannot
#   --force       debootstrap again and rebuild every local image
#   --env-file F  set the three variables in F (created when missing) instead of printing them
#
# Environment: KAIROS_BASE_CACHE (where the root file system tarball is kept between runs;
# default ${XDG_CACHE_HOME:-$HOME/.cache}/kairos), KAIROS_DEBIAN_SUITE (bookworm),
# KAIROS_DEBIAN_MIRROR (http://deb.debian.org/debian), KAIROS_CA_BUNDLE
# (/etc/ssl/certs/ca-certificates.crt). Needs root (debootstrap) for the first build only.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=${KAIROS_DEBIAN_SUITE:-bookworm}
MIRROR=${KAIROS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${KAIROS_BASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kairos}
CA_BUNDLE=${KAIROS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
INCLUDE=python3,python3-venv,ca-certificates
PUBLIC_BASE=python:3.11-slim
PUBLIC_POSTGRES=postgres:16-alpine
PUBLIC_REDIS=redis:7-alpine

ROOTFS_IMAGE=kairos-debian:$SUITE
BASE_IMAGE=kairos-base:$SUITE
POSTGRES_IMAGE=kairos-postgres:$SUITE
REDIS_IMAGE=kairos-redis:$SUITE

auto=0 force=0 env_file=
while [ $# -gt 0 ]; do
    case $1 in
        --auto) auto=1 ;;
        --force) force=1 ;;
        --env-file) env_file=${2:?--env-file needs a path}; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-base-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

log() { echo "build-base-image: $*" >&2; }
have_image() { docker image inspect "$1" > /dev/null 2>&1; }

emit() { # KAIROS_BASE_IMAGE KAIROS_POSTGRES_IMAGE KAIROS_REDIS_IMAGE
    local lines
    lines=$(printf 'KAIROS_BASE_IMAGE=%s\nKAIROS_POSTGRES_IMAGE=%s\nKAIROS_REDIS_IMAGE=%s\n' "$@")
    if [ -z "$env_file" ]; then
        echo "$lines"
        return
    fi
    touch "$env_file"
    local kept
    kept=$(grep -v -E '^(KAIROS_BASE_IMAGE|KAIROS_POSTGRES_IMAGE|KAIROS_REDIS_IMAGE)=' "$env_file" || true)
    printf '%s\n%s\n' "$kept" "$lines" | sed '/./,$!d' > "$env_file.tmp"
    mv "$env_file.tmp" "$env_file"
    log "wrote the image variables to $env_file"
}

if ! docker info > /dev/null 2>&1; then
    log "no Docker engine answers (start one: dockerd > /tmp/dockerd.log 2>&1 &)"
    exit 1
fi

if [ "$auto" = 1 ]; then
    if have_image "$PUBLIC_BASE" || docker pull -q "$PUBLIC_BASE" > /dev/null 2>&1; then
        if { have_image "$PUBLIC_POSTGRES" || docker pull -q "$PUBLIC_POSTGRES"; } > /dev/null 2>&1 \
            && { have_image "$PUBLIC_REDIS" || docker pull -q "$PUBLIC_REDIS"; } > /dev/null 2>&1; then
            log "the public images can be pulled: nothing to build"
            emit "$PUBLIC_BASE" "$PUBLIC_POSTGRES" "$PUBLIC_REDIS"
            exit 0
        fi
    fi
    log "the public images cannot be pulled: building local ones from Debian's archive"
fi

# 1. The root file system, cached as a tarball (debootstrap takes minutes; the import seconds).
tarball=$CACHE/debian-$SUITE-minbase-python3.tar
if [ "$force" = 1 ] || [ ! -s "$tarball" ]; then
    if ! command -v debootstrap > /dev/null; then
        if [ "$(id -u)" = 0 ]; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
        else
            log "debootstrap is missing: sudo apt-get install debootstrap"
            exit 1
        fi
    fi
    mkdir -p "$CACHE"
    work=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    log "debootstrap --variant=minbase $SUITE from $MIRROR (a few minutes)"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$work/rootfs" "$MIRROR" \
        > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    cat > "$work/rootfs/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
SOURCES
    rm -rf "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/cache/apt/"*.bin \
        "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/log/"*.log
    tar --numeric-owner -C "$work/rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$work"
    trap - EXIT
    log "cached $tarball ($(du -h "$tarball" | cut -f1))"
    force=1
fi

# 2. The imported root file system.
if [ "$force" = 1 ] || ! have_image "$ROOTFS_IMAGE"; then
    log "docker import $tarball as $ROOTFS_IMAGE"
    docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
        "$tarball" "$ROOTFS_IMAGE" > /dev/null
fi

# 3. The base (the host's CA bundle for pip) and the two backing services on it.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$ROOT/docker/base/Dockerfile" "$context/Dockerfile"
cp "$CA_BUNDLE" "$context/ca-bundle.crt"
build() { # TAG ARG=VALUE CONTEXT: quiet unless it fails (the engine's layer cache keeps it fast)
    local out
    out=$(mktemp)
    local flags=()
    [ "$force" = 1 ] && flags+=(--no-cache)
    log "building $1"
    if ! docker build "${flags[@]}" --build-arg "$2" -t "$1" "$3" > "$out" 2>&1; then
        tail -30 "$out" >&2
        rm -f "$out"
        exit 1
    fi
    rm -f "$out"
}
build "$BASE_IMAGE" ROOTFS_IMAGE="$ROOTFS_IMAGE" "$context"
build "$POSTGRES_IMAGE" BASE_IMAGE="$BASE_IMAGE" "$ROOT/docker/postgres"
build "$REDIS_IMAGE" BASE_IMAGE="$BASE_IMAGE" "$ROOT/docker/redis"

emit "$BASE_IMAGE" "$POSTGRES_IMAGE" "$REDIS_IMAGE"
