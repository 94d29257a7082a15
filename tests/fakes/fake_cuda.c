/* A fake libcuda.so.1 (CUDA driver API). Knobs (env): see tests/fakes/node.py.
 * Like the real driver, the first cuInit result sticks for the whole process. */
#include "fake_common.h"

typedef int CUresult;
typedef int CUdevice;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_NOT_INITIALIZED = 3,
       CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101 };

static int init_done;
static CUresult init_result;

static int device_count(void)
{
    return fake_visible(fake_env_int("FAKE_CUDA_COUNT", fake_env_int("FAKE_GPU_COUNT", 4)));
}

CUresult cuInit(unsigned int flags)
{
    int attempt, first;
    (void)flags;
    if (init_done)
        return init_result;
    attempt = fake_next_attempt("cuInit");
    if (fake_env_int("FAKE_CUDA_HANG", 0))
        fake_hang("cuInit");
    first = fake_env_int("FAKE_CUDA_FAIL_FIRST", 0);
    if (fake_env_int("FAKE_CUDA_ERROR", 0))
        init_result = fake_env_int("FAKE_CUDA_ERROR", 0);
    else if (attempt <= first)
        init_result = fake_env_int("FAKE_CUDA_FAIL_CODE", 802);
    else if (device_count() == 0)
        init_result = CUDA_ERROR_NO_DEVICE;
    else
        init_result = CUDA_SUCCESS;
    init_done = 1;
    return init_result;
}

CUresult cuDriverGetVersion(int *version)
{
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = fake_env_int("FAKE_CUDA_DRIVER_VERSION", 12040);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!init_done)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (init_result != CUDA_SUCCESS)
        return init_result;
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!init_done || init_result != CUDA_SUCCESS)
        return init_done ? init_result : CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!init_done || init_result != CUDA_SUCCESS)
        return init_done ? init_result : CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", fake_env_str("FAKE_GPU_NAME", "NVIDIA H100 80GB HBM3"));
    return CUDA_SUCCESS;
}

static const char *error_name(CUresult e)
{
    switch (e) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return NULL;
    }
}

static const char *error_string(CUresult e)
{
    switch (e) {
    case 0: return "no error";
    case 3: return "initialization error";
    case 34: return "CUDA driver is a stub library";
    case 46: return "CUDA-capable device(s) is/are busy or unavailable";
    case 100: return "no CUDA-capable device is detected";
    case 802: return "system not yet initialized";
    case 803: return "system has unsupported display driver / cuda driver combination";
    case 804: return "forward compatibility was attempted on non supported HW";
    case 999: return "unknown error";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult e, const char **out)
{
    *out = error_name(e);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **out)
{
    *out = error_string(e);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
