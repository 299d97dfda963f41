#!/bin/sh
# Builds the images' executables into OUT_DIR (default ./out): commerce-api
# and order-workflow with the k8s membership provider, and prestop (the
# preStop delay; the final image has no shell and no sleep). One command
# line for the Dockerfile and for scripts/deploy's test, which checks that
# what it yields is static (no interpreter, no shared libraries).
# Run it from the module root.
set -eu
out="${1:-out}"
mkdir -p "$out"
for pkg in ./edge/cmd/commerce-api ./actors/cmd/order-workflow ./scripts/deploy/prestop; do
	CGO_ENABLED=0 go build -trimpath -tags k8s -ldflags='-s -w' -o "$out/$(basename "$pkg")" "$pkg"
done
