/* Names for OpenCL and CLBlast error codes, so every message says what the
 * number means without the user looking it up. */
#include <clblast_c.h>

#include "backends/opencl/internal.h"

const char *ug_opencl_error_name(cl_int err)
{
    switch (err) {
    case 0: return "CL_SUCCESS";
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -3: return "CL_COMPILER_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -7: return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case -8: return "CL_MEM_COPY_OVERLAP";
    case -9: return "CL_IMAGE_FORMAT_MISMATCH";
    case -10: return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -12: return "CL_MAP_FAILURE";
    case -13: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case -14: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -15: return "CL_COMPILE_PROGRAM_FAILURE";
    case -16: return "CL_LINKER_NOT_AVAILABLE";
    case -17: return "CL_LINK_PROGRAM_FAILURE";
    case -18: return "CL_DEVICE_PARTITION_FAILED";
    case -19: return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
    case -30: return "CL_INVALID_VALUE";
    case -31: return "CL_INVALID_DEVICE_TYPE";
    case -32: return "CL_INVALID_PLATFORM";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -35: return "CL_INVALID_QUEUE_PROPERTIES";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -37: return "CL_INVALID_HOST_PTR";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -39: return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
    case -40: return "CL_INVALID_IMAGE_SIZE";
    case -41: return "CL_INVALID_SAMPLER";
    case -42: return "CL_INVALID_BINARY";
    case -43: return "CL_INVALID_BUILD_OPTIONS";
    case -44: return "CL_INVALID_PROGRAM";
    case -45: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -47: return "CL_INVALID_KERNEL_DEFINITION";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -56: return "CL_INVALID_GLOBAL_OFFSET";
    case -57: return "CL_INVALID_EVENT_WAIT_LIST";
    case -58: return "CL_INVALID_EVENT";
    case -59: return "CL_INVALID_OPERATION";
    case -60: return "CL_INVALID_GL_OBJECT";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case -62: return "CL_INVALID_MIP_LEVEL";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -64: return "CL_INVALID_PROPERTY";
    case -65: return "CL_INVALID_IMAGE_DESCRIPTOR";
    case -66: return "CL_INVALID_COMPILER_OPTIONS";
    case -67: return "CL_INVALID_LINKER_OPTIONS";
    case -68: return "CL_INVALID_DEVICE_PARTITION_COUNT";
    case -69: return "CL_INVALID_PIPE_SIZE";
    case -70: return "CL_INVALID_DEVICE_QUEUE";
    case -71: return "CL_INVALID_SPEC_ID";
    case -72: return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
    case -1000: return "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    case -1002: return "CL_INVALID_D3D10_DEVICE_KHR";
    case -1057: return "CL_DEVICE_PARTITION_FAILED_EXT";
    case -1058: return "CL_INVALID_PARTITION_COUNT_EXT";
    case -1059: return "CL_INVALID_PARTITION_NAME_EXT";
    case -1094: return "CL_INVALID_ACCELERATOR_INTEL";
    case -1095: return "CL_INVALID_ACCELERATOR_TYPE_INTEL";
    case -1096: return "CL_INVALID_ACCELERATOR_DESCRIPTOR_INTEL";
    case -1097: return "CL_ACCELERATOR_TYPE_NOT_SUPPORTED_INTEL";
    case -1098: return "CL_INVALID_VA_API_MEDIA_ADAPTER_INTEL";
    case -1099: return "CL_INVALID_VA_API_MEDIA_SURFACE_INTEL";
    case -1100: return "CL_VA_API_MEDIA_SURFACE_ALREADY_ACQUIRED_INTEL";
    case -1101: return "CL_VA_API_MEDIA_SURFACE_NOT_ACQUIRED_INTEL";
    case -9999: return "NVIDIA_ILLEGAL_ADDRESS_OR_KERNEL_ABORT";
    }
    return "UNKNOWN_OPENCL_ERROR";
}

const char *ug_opencl_clblast_error_name(int status)
{
    /* CLBlast shares the OpenCL codes above -1000. */
    if (status > -1000)
        return ug_opencl_error_name((cl_int)status);
    switch (status) {
    case CLBlastNotImplemented: return "CLBlastNotImplemented";
    case CLBlastInvalidMatrixA: return "CLBlastInvalidMatrixA";
    case CLBlastInvalidMatrixB: return "CLBlastInvalidMatrixB";
    case CLBlastInvalidMatrixC: return "CLBlastInvalidMatrixC";
    case CLBlastInvalidVectorX: return "CLBlastInvalidVectorX";
    case CLBlastInvalidVectorY: return "CLBlastInvalidVectorY";
    case CLBlastInvalidDimension: return "CLBlastInvalidDimension";
    case CLBlastInvalidLeadDimA: return "CLBlastInvalidLeadDimA";
    case CLBlastInvalidLeadDimB: return "CLBlastInvalidLeadDimB";
    case CLBlastInvalidLeadDimC: return "CLBlastInvalidLeadDimC";
    case CLBlastInvalidIncrementX: return "CLBlastInvalidIncrementX";
    case CLBlastInvalidIncrementY: return "CLBlastInvalidIncrementY";
    case CLBlastInsufficientMemoryA: return "CLBlastInsufficientMemoryA";
    case CLBlastInsufficientMemoryB: return "CLBlastInsufficientMemoryB";
    case CLBlastInsufficientMemoryC: return "CLBlastInsufficientMemoryC";
    case CLBlastInsufficientMemoryX: return "CLBlastInsufficientMemoryX";
    case CLBlastInsufficientMemoryY: return "CLBlastInsufficientMemoryY";
    case CLBlastInsufficientMemoryTemp: return "CLBlastInsufficientMemoryTemp";
    case CLBlastInvalidBatchCount: return "CLBlastInvalidBatchCount";
    case CLBlastInvalidOverrideKernel: return "CLBlastInvalidOverrideKernel";
    case CLBlastMissingOverrideParameter: return "CLBlastMissingOverrideParameter";
    case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
    case CLBlastNoHalfPrecision: return "CLBlastNoHalfPrecision";
    case CLBlastNoDoublePrecision: return "CLBlastNoDoublePrecision";
    case CLBlastInvalidVectorScalar: return "CLBlastInvalidVectorScalar";
    case CLBlastInsufficientMemoryScalar: return "CLBlastInsufficientMemoryScalar";
    case CLBlastDatabaseError: return "CLBlastDatabaseError";
    case CLBlastUnknownError: return "CLBlastUnknownError";
    case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
    }
    return ug_opencl_error_name((cl_int)status);
}

ug_status ug_opencl_status_of(cl_int err)
{
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_BUFFER_SIZE:
        return UG_ERR_OUT_OF_MEMORY;
    default:
        return UG_ERR_BACKEND;
    }
}

ug_status ug_opencl_fail(ug_status status, const char *call, cl_int err)
{
    if (ug_opencl_host && ug_opencl_host->set_error)
        return ug_opencl_host->set_error(status, "OpenCL: %s failed: %d %s", call, (int)err,
                                         ug_opencl_error_name(err));
    return status;
}
