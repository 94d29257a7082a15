/* A fake libnvidia-ml.so.1 that the real pynvml (nvidia-ml-py) loads.
 * Knobs (env): see tests/fakes/node.py. */
#include "fake_common.h"

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_UNKNOWN = 999
};

#define MAX_GPUS 64
struct fake_device { unsigned int index; };
typedef struct fake_device *nvmlDevice_t;
static struct fake_device devices[MAX_GPUS];
static int initialised;

typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned char clusterUuid[16]; nvmlReturn_t status; unsigned int cliqueId; unsigned int state; } nvmlGpuFabricInfo_t;
typedef struct { unsigned int version; unsigned char clusterUuid[16]; nvmlReturn_t status; unsigned int cliqueId;
                 unsigned int state; unsigned int healthMask; unsigned char healthSummary; } nvmlGpuFabricInfoV_t;

static int gpu_count(void)
{
    int n = fake_env_int("FAKE_NVML_COUNT", fake_env_int("FAKE_GPU_COUNT", 4));
    return n < 0 ? 0 : (n > MAX_GPUS ? MAX_GPUS : n);
}

static nvmlReturn_t check_device(nvmlDevice_t dev)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (dev == NULL || dev < devices || dev >= devices + gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    fake_next_attempt("nvmlInit");
    if (fake_env_int("FAKE_NVML_HANG", 0))
        fake_hang("nvmlInit");
    if (fake_env_int("FAKE_NVML_INIT_ERROR", 0))
        return fake_env_int("FAKE_NVML_INIT_ERROR", 0);
    for (int i = 0; i < MAX_GPUS; i++)
        devices[i].index = (unsigned int)i;
    initialised++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, fake_env_str("FAKE_DRIVER_VERSION", "550.54.15"));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return copy_string(version, length, "12.550.54.15");
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    if (v == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = fake_env_int("FAKE_CUDA_DRIVER_VERSION", 12040);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)gpu_count();
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= (unsigned int)gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc == NVML_SUCCESS)
        *index = dev->index;
    return rc;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    nvmlReturn_t rc = check_device(dev);
    return rc ? rc : copy_string(name, length, fake_env_str("FAKE_GPU_NAME", "NVIDIA H100 80GB HBM3"));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    char buf[96];
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    snprintf(buf, sizeof buf, "GPU-fa4e0000-0000-4000-8000-%012u", dev->index);
    return copy_string(uuid, length, buf);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t dev, unsigned int *minor)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc == NVML_SUCCESS)
        *minor = dev->index;
    return rc;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t dev, int *major, int *minor)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc == NVML_SUCCESS) {
        *major = 9;
        *minor = 0;
    }
    return rc;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    memset(pci, 0, sizeof *pci);
    pci->domain = 0;
    pci->bus = 0x18 + 0x10 * dev->index;
    pci->pciDeviceId = 0x233010de;
    pci->pciSubSystemId = 0x16c110de;
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t dev, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(dev, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t dev, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(dev, pci); }

static void memory_values(unsigned long long *total, unsigned long long *used)
{
    *total = (unsigned long long)fake_env_int("FAKE_GPU_MEMORY_MIB", 81559) << 20;
    *used = (unsigned long long)fake_env_int("FAKE_GPU_MEMORY_USED_MIB", 0) << 20;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    memory_values(&mem->total, &mem->used);
    mem->free = mem->total - mem->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *mem)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    memory_values(&mem->total, &mem->used);
    mem->reserved = 0;
    mem->free = mem->total - mem->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util)
{
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    util->gpu = (unsigned int)fake_env_int("FAKE_GPU_UTIL", 0);
    util->memory = (unsigned int)fake_env_int("FAKE_GPU_MEM_UTIL", 0);
    return NVML_SUCCESS;
}

/* FAKE_P2P words -> nvmlGpuP2PStatus_t; "corrupt" looks healthy to NVML. */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int index, int *status)
{
    static const char *words[] = {"ok", "chipset_not_supported", "gpu_not_supported",
                                  "topology_not_supported", "disabled", "not_supported", "unknown"};
    char word[64];
    nvmlReturn_t rc = check_device(a);
    if (rc || (rc = check_device(b)))
        return rc;
    if (status == NULL || index < 0 || index > 5)
        return NVML_ERROR_INVALID_ARGUMENT;
    *status = 0;
    if (fake_pair_status("FAKE_P2P", (int)a->index, (int)b->index, word, sizeof word)) {
        for (int i = 0; i < 7; i++)
            if (strcmp(word, words[i]) == 0)
                *status = i;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level)
{
    static const char *words[] = {"internal", "single", "multiple", "hostbridge", "node", "system"};
    char word[64];
    nvmlReturn_t rc = check_device(a);
    if (rc || (rc = check_device(b)))
        return rc;
    *level = a == b ? 0 : 40;
    if (fake_pair_status("FAKE_TOPOLOGY", (int)a->index, (int)b->index, word, sizeof word)) {
        for (int i = 0; i < 6; i++)
            if (strcmp(word, words[i]) == 0)
                *level = i * 10;
    }
    return NVML_SUCCESS;
}

/* FAKE_FABRIC: one word for every GPU, or "1:in_progress,3:not_started" per GPU.
 * Words: completed (default), in_progress, not_started, not_supported (state 0),
 * unsupported (the call returns NVML_ERROR_NOT_SUPPORTED), failed (completed with
 * status FAKE_FABRIC_STATUS, default 999), degraded (completed, degraded bandwidth). */
static const char *fabric_word(unsigned int index, char *out, size_t outlen)
{
    const char *spec = fake_env_str("FAKE_FABRIC", "completed");
    const char *p = spec;
    if (strchr(spec, ':') == NULL)
        return spec;
    while (p && *p) {
        unsigned int gpu;
        char word[64] = {0};
        if (sscanf(p, "%u:%63[^,]", &gpu, word) == 2 && gpu == index) {
            snprintf(out, outlen, "%s", word);
            return out;
        }
        p = strchr(p, ',');
        if (p)
            p++;
    }
    return "completed";
}

static nvmlReturn_t fabric_state(nvmlDevice_t dev, nvmlReturn_t *status, unsigned int *state,
                                 unsigned int *health)
{
    char buf[64];
    const char *word;
    nvmlReturn_t rc = check_device(dev);
    if (rc)
        return rc;
    word = fabric_word(dev->index, buf, sizeof buf);
    *status = NVML_SUCCESS;
    *health = 0;
    if (strcmp(word, "unsupported") == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (strcmp(word, "not_supported") == 0)
        *state = 0;
    else if (strcmp(word, "not_started") == 0)
        *state = 1;
    else if (strcmp(word, "in_progress") == 0) {
        *state = 2;
        *status = NVML_ERROR_UNKNOWN;
    } else
        *state = 3;
    if (strcmp(word, "failed") == 0)
        *status = fake_env_int("FAKE_FABRIC_STATUS", NVML_ERROR_UNKNOWN);
    if (strcmp(word, "degraded") == 0)
        *health = 1; /* DEGRADED_BW_TRUE at shift 0 */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t dev, nvmlGpuFabricInfo_t *info)
{
    unsigned int health;
    nvmlReturn_t rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    rc = fabric_state(dev, &info->status, &info->state, &health);
    info->clusterUuid[0] = 0xfa;
    return rc;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t dev, nvmlGpuFabricInfoV_t *info)
{
    unsigned int version;
    nvmlReturn_t rc;
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    version = info->version;
    if (version != 0x02000024 && version != 0x3000028)
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    rc = fabric_state(dev, &info->status, &info->state, &info->healthMask);
    info->clusterUuid[0] = 0xfa;
    if (version == 0x3000028)
        info->healthSummary = info->healthMask ? 3 : 1;
    return rc;
}
