/* A fake libcudart.so.<CUDART_MAJOR> (CUDA runtime API). Knobs (env): see
 * tests/fakes/node.py. The first initialisation result sticks for the whole
 * process, as with the real runtime. "Device memory" is host memory; a pair
 * marked "corrupt" in FAKE_P2P flips bits in every peer copy between the two. */
#include <dlfcn.h>
#include "fake_common.h"

#ifndef CUDART_MAJOR
#define CUDART_MAJOR 12
#endif

typedef int cudaError_t;
enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101,
    cudaErrorPeerAccessUnsupported = 217, cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorPeerAccessNotEnabled = 705
};

static int init_done;
static cudaError_t init_result;
static int current_device;
static unsigned char peer_enabled[64][64];

struct allocation { void *ptr; size_t size; int device; };
static struct allocation allocations[4096];

static int device_count(void)
{
    return fake_visible(fake_env_int("FAKE_CUDART_COUNT", fake_env_int("FAKE_GPU_COUNT", 4)));
}

static cudaError_t runtime_init(void)
{
    int attempt;
    if (init_done)
        return init_result;
    attempt = fake_next_attempt("cudart");
    if (fake_env_int("FAKE_CUDART_HANG", 0))
        fake_hang("cudart");
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == NULL)
        init_result = cudaErrorInsufficientDriver;
    else if (fake_env_int("FAKE_CUDART_ERROR", 0))
        init_result = fake_env_int("FAKE_CUDART_ERROR", 0);
    else if (attempt <= fake_env_int("FAKE_CUDART_FAIL_FIRST", 0))
        init_result = fake_env_int("FAKE_CUDART_FAIL_CODE", 802);
    else if (device_count() == 0)
        init_result = cudaErrorNoDevice;
    else
        init_result = cudaSuccess;
    init_done = 1;
    return init_result;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess)
        return rc;
    if (count == NULL)
        return cudaErrorInvalidValue;
    *count = device_count();
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (version == NULL)
        return cudaErrorInvalidValue;
    *version = fake_env_int("FAKE_CUDART_VERSION", CUDART_MAJOR == 13 ? 13000 : 12040);
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    if (version == NULL)
        return cudaErrorInvalidValue;
    /* The real runtime answers 0 (and success) when no driver is installed. */
    *version = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) ? fake_env_int("FAKE_CUDA_DRIVER_VERSION", 12040) : 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess)
        return rc;
    if (device < 0 || device >= device_count())
        return cudaErrorInvalidDevice;
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    cudaError_t rc = runtime_init();
    if (rc == cudaSuccess)
        *device = current_device;
    return rc;
}

cudaError_t cudaDeviceSynchronize(void) { return runtime_init(); }

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess)
        return rc;
    for (int i = 0; i < 4096; i++) {
        if (allocations[i].ptr == NULL) {
            allocations[i].ptr = calloc(1, size ? size : 1);
            if (allocations[i].ptr == NULL)
                return cudaErrorMemoryAllocation;
            allocations[i].size = size;
            allocations[i].device = current_device;
            *ptr = allocations[i].ptr;
            return cudaSuccess;
        }
    }
    return cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *ptr)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess || ptr == NULL)
        return rc;
    for (int i = 0; i < 4096; i++) {
        if (allocations[i].ptr == ptr) {
            free(ptr);
            allocations[i].ptr = NULL;
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidValue;
}

static int device_of(const void *ptr)
{
    for (int i = 0; i < 4096; i++)
        if (allocations[i].ptr != NULL && (const char *)ptr >= (const char *)allocations[i].ptr
            && (const char *)ptr < (const char *)allocations[i].ptr + allocations[i].size)
            return allocations[i].device;
    return -1; /* host memory */
}

static int pair_is(const char *word, int a, int b)
{
    char buf[64];
    return fake_pair_status("FAKE_P2P", a, b, buf, sizeof buf) && strcmp(buf, word) == 0;
}

static void copy_between(void *dst, int dst_dev, const void *src, int src_dev, size_t n)
{
    if (n && src_dev >= 0 && dst_dev >= 0 && src_dev != dst_dev && pair_is("hang", src_dev, dst_dev))
        fake_hang("memcpy_peer"); /* a wedged peer copy (P2P002 timeout naming the pair) */
    memcpy(dst, src, n);
    if (n && src_dev >= 0 && dst_dev >= 0 && src_dev != dst_dev && pair_is("corrupt", src_dev, dst_dev))
        ((unsigned char *)dst)[n / 2] ^= 0x5a;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    cudaError_t rc = runtime_init();
    (void)kind;
    if (rc != cudaSuccess)
        return rc;
    copy_between(dst, device_of(dst), src, device_of(src), n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeer(void *dst, int dst_dev, const void *src, int src_dev, size_t n)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess)
        return rc;
    if (dst_dev < 0 || src_dev < 0 || dst_dev >= device_count() || src_dev >= device_count())
        return cudaErrorInvalidDevice;
    copy_between(dst, dst_dev, src, src_dev, n);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t n)
{
    cudaError_t rc = runtime_init();
    if (rc == cudaSuccess)
        memset(ptr, value, n);
    return rc;
}

static int peer_supported(int a, int b)
{
    static const char *no[] = {"not_supported", "chipset_not_supported", "gpu_not_supported",
                               "topology_not_supported", "disabled", "unknown"};
    for (int i = 0; i < 6; i++)
        if (pair_is(no[i], a, b))
            return 0;
    return a != b;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess)
        return rc;
    if (device < 0 || peer < 0 || device >= device_count() || peer >= device_count())
        return cudaErrorInvalidDevice;
    *can = peer_supported(device, peer);
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    cudaError_t rc = runtime_init();
    (void)flags;
    if (rc != cudaSuccess)
        return rc;
    if (peer < 0 || peer >= device_count())
        return cudaErrorInvalidDevice;
    if (!peer_supported(current_device, peer))
        return cudaErrorPeerAccessUnsupported;
    if (peer_enabled[current_device][peer])
        return cudaErrorPeerAccessAlreadyEnabled;
    peer_enabled[current_device][peer] = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
    cudaError_t rc = runtime_init();
    if (rc != cudaSuccess)
        return rc;
    if (peer < 0 || peer >= device_count() || !peer_enabled[current_device][peer])
        return cudaErrorPeerAccessNotEnabled;
    peer_enabled[current_device][peer] = 0;
    return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case 0: return "cudaSuccess";
    case 1: return "cudaErrorInvalidValue";
    case 2: return "cudaErrorMemoryAllocation";
    case 3: return "cudaErrorInitializationError";
    case 34: return "cudaErrorStubLibrary";
    case 35: return "cudaErrorInsufficientDriver";
    case 46: return "cudaErrorDevicesUnavailable";
    case 100: return "cudaErrorNoDevice";
    case 101: return "cudaErrorInvalidDevice";
    case 217: return "cudaErrorPeerAccessUnsupported";
    case 704: return "cudaErrorPeerAccessAlreadyEnabled";
    case 705: return "cudaErrorPeerAccessNotEnabled";
    case 802: return "cudaErrorSystemNotReady";
    case 803: return "cudaErrorSystemDriverMismatch";
    case 804: return "cudaErrorCompatNotSupportedOnDevice";
    case 999: return "cudaErrorUnknown";
    default: return "unrecognized error code";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case 0: return "no error";
    case 3: return "initialization error";
    case 34: return "CUDA driver is a stub library";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case 46: return "CUDA-capable device(s) is/are busy or unavailable";
    case 100: return "no CUDA-capable device is detected";
    case 217: return "peer access is not supported between these two devices";
    case 802: return "system not yet initialized";
    case 803: return "system has unsupported display driver / cuda driver combination";
    case 804: return "forward compatibility was attempted on non supported HW";
    case 999: return "unknown error";
    default: return cudaGetErrorName(e);
    }
}
