#!/usr/bin/env bash
# Run on a Debian 12 machine with network access (as any user): downloads the
# Debian packages unigrad builds against into .gpu-debs/ (git ignores it), to
# be taken to a GPU machine that has the CUDA toolkit but no Debian packages
# and no network. build.sh there unpacks them into a private prefix.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-debs
cd .gpu-debs
# The libraries, their headers and the runtime libraries they need beyond
# glibc and libstdc++; pkgconf because CMake finds OpenBLAS through it;
# the data set for ug-train; Open MPI and the libraries it loads, for the MPI
# module and mpirun (relocated there through OPAL_PREFIX, env.sh). oneDNN
# (CPU convolutions) is left out: the GPU build does not need it, and it
# would double the size.
apt-get download \
    libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 \
    zlib1g zlib1g-dev \
    ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers \
    libclblast1 libclblast-dev \
    pkgconf pkgconf-bin libpkgconf3 \
    libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7 \
    libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200 \
    libnl-route-3-200 libltdl7 libpsm2-2 libpsm-infinipath1 libmunge2 \
    dataset-fashion-mnist
du -sh .
