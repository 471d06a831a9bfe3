# Sourced by build.sh, test.sh and bench.sh: where the unpacked packages, the
# build and NVIDIA's libraries are, as environment variables.
UG_GPU_PREFIX=${UG_GPU_PREFIX:-/tmp/unigrad-deps}
UG_GPU_BUILD=${UG_GPU_BUILD:-build-gpu}
ug_gpu_lib=$UG_GPU_PREFIX/usr/lib/x86_64-linux-gnu

# The first file called $1 under the usual CUDA and driver folders (and
# PyTorch's pip packages, which carry cuBLAS and NCCL), or nothing.
ug_gpu_find() {
    find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/local/nvidia /usr/lib/x86_64-linux-gnu \
        /usr/lib64 /opt /usr/local/lib -name "$1" -print -quit 2>/dev/null || true
}

cublas=$(ug_gpu_find 'libcublas.so.1[0-9]*')
# NCCL, for ug_comm_nccl_create (nccl@cuda:0 runs it for real).
nccl=$(ug_gpu_find 'libnccl.so.2')
# cuDNN, for the module's convolutions (conv.cpp; UG_CONV=im2col: none).
cudnn=$(ug_gpu_find 'libcudnn.so.9')
export LD_LIBRARY_PATH=$ug_gpu_lib:$ug_gpu_lib/openblas-pthread${cublas:+:$(dirname "$cublas")}${nccl:+:$(dirname "$nccl")}${cudnn:+:$(dirname "$cudnn")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# NVIDIA's OpenCL library, when the driver has one, registered with the ICD
# loader through a private vendors folder (nothing is written outside it).
nvidia_opencl=$(ug_gpu_find 'libnvidia-opencl.so.1')
if [ -n "$nvidia_opencl" ]; then
    mkdir -p "$UG_GPU_PREFIX/icd"
    echo "$nvidia_opencl" >"$UG_GPU_PREFIX/icd/nvidia.icd"
    export OCL_ICD_VENDORS=$UG_GPU_PREFIX/icd
fi

# Open MPI from the packages (fetch-debs.sh), moved from /usr to the prefix:
# OPAL_PREFIX tells it where its plug-ins and helpers now are. Only when
# unpacked, so that an Open MPI of the machine's own is left alone.
ug_gpu_mpirun=$UG_GPU_PREFIX/usr/bin/mpirun.openmpi
if [ -x "$ug_gpu_mpirun" ]; then
    export OPAL_PREFIX=$UG_GPU_PREFIX/usr OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
