/* CLBlast's own kernel parameters for a device: only its C++ API reads
 * them (RetrieveParameters), and the GEMM tuning (gemm_tune.c) must be able
 * to install them again after trying others, which CLBlast cannot undo. */
#include <clblast.h>

#include <string>
#include <unordered_map>

extern "C" bool ug_opencl_clblast_database(cl_device_id device, const char *kernel,
                                           const char *const *names, int count, size_t *values)
{
    try {
        std::unordered_map<std::string, size_t> params;
        if (clblast::RetrieveParameters(device, kernel, clblast::Precision::kSingle, params) !=
            clblast::StatusCode::kSuccess)
            return false;
        for (int i = 0; i < count; ++i) {
            auto found = params.find(names[i]);
            if (found == params.end())
                return false;
            values[i] = found->second;
        }
        return true;
    } catch (...) {
        return false; /* nothing may unwind into C */
    }
}
