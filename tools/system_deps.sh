#!/usr/bin/env bash
# Installs the system packages axle's backends and tools need, when they are missing:
#   pocl-opencl-icd  an OpenCL CPU device (the OpenCL backend runs on it here and in CI)
#   graphviz         renders the DOT graph dumps to SVG/PNG
#   gcc              compiles ahead-of-time (AOT) outputs and their C harness
#   openmpi-bin, libopenmpi-dev  Open MPI: mpirun and what the `mpi` extra (mpi4py) builds on
set -euo pipefail

missing=()
compgen -G "/etc/OpenCL/vendors/*.icd" > /dev/null || missing+=(pocl-opencl-icd)
command -v dot > /dev/null || missing+=(graphviz)
command -v cc > /dev/null || missing+=(gcc)
command -v mpirun > /dev/null || missing+=(openmpi-bin libopenmpi-dev)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null; then
    echo "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" > /dev/null
else
    echo "axle: missing system packages: ${missing[*]}" >&2
    echo "      install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    if [ "${CI:-}" = "true" ]; then
        exit 1
    fi
fi
