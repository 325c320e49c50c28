#!/usr/bin/env bash
# The control plane's build script ships in the package (so `sextant dev` works from a wheel); this is its
# checkout path, for the Makefile and the habit.
exec bash "$(dirname "$0")/../operator/sextant/dev/localcluster/build-controlplane.sh" "$@"
