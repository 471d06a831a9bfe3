#!/usr/bin/env bash
# Builds unigrad with its CUDA module (libunigrad-cuda.so) on an NVIDIA
# machine that has CMake, a C/C++ compiler and the CUDA toolkit but none of
# the Debian packages unigrad needs: they come as .deb files fetched
# elsewhere by fetch-debs.sh and are unpacked with dpkg -x into a private
# prefix, never into /. Run from anywhere; docs/GPU.md says how.
#   UG_GPU_PREFIX  where the packages are unpacked (default /tmp/unigrad-deps)
#   UG_GPU_BUILD   the build folder (default build-gpu)
#   UG_CUDA_ARCHS  SM targets (default: the project's list, see backends/hip)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/gpu/env.sh

if [ ! -e "$UG_GPU_PREFIX/.unpacked" ]; then
    mkdir -p "$UG_GPU_PREFIX"
    for deb in .gpu-debs/*.deb; do
        dpkg -x "$deb" "$UG_GPU_PREFIX"
    done
    # CLBlast's CMake file names the system's OpenCL library and headers by
    # absolute path: point them into the prefix.
    sed -i "s|\"/usr/|\"$UG_GPU_PREFIX/usr/|g; s|;/usr/include\"|;$UG_GPU_PREFIX/usr/include\"|g" \
        "$ug_gpu_lib"/cmake/CLBlast/*.cmake
    touch "$UG_GPU_PREFIX/.unpacked"
fi

# pkg-config (OpenBLAS is found through it) reads only the prefix's files,
# with the prefix prepended to the paths they name.
export PKG_CONFIG_LIBDIR=$ug_gpu_lib/pkgconfig:$ug_gpu_lib/openblas-pthread/pkgconfig:$UG_GPU_PREFIX/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$UG_GPU_PREFIX
pkg_config=$(command -v pkg-config || echo "$UG_GPU_PREFIX/usr/bin/pkgconf")

# The MPI module against the prefix's Open MPI (env.sh, read again now that
# it is unpacked).
. tools/gpu/env.sh
mpi=()
if [ -x "$ug_gpu_mpirun" ]; then
    mpi=("-DMPI_C_COMPILER=$UG_GPU_PREFIX/usr/bin/mpicc.openmpi" "-DMPIEXEC_EXECUTABLE=$ug_gpu_mpirun")
fi
archs=()
if [ -n "${UG_CUDA_ARCHS:-}" ]; then
    archs=("-DUG_CUDA_ARCHS=$UG_CUDA_ARCHS")
fi
# oneDNN is not among the packages: the CPU device convolves through im2col.
cmake -S . -B "$UG_GPU_BUILD" -DCMAKE_PREFIX_PATH="$UG_GPU_PREFIX/usr" \
    -DPKG_CONFIG_EXECUTABLE="$pkg_config" -DUG_PYTHON3="$(command -v python3)" -DUG_WITH_HIP=OFF -DUG_WITH_ONEDNN=OFF "${archs[@]}" "${mpi[@]}"
cmake --build "$UG_GPU_BUILD" -j "$(nproc)"
