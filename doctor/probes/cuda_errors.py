"""CUDA initialisation error codes: names in both APIs, what they mean on a node, and
which of them a fresh process may outgrow (worth retrying)."""

from __future__ import annotations

# code -> (runtime API name, driver API name or "", what it means for the node)
CUDA_ERRORS: dict[int, tuple[str, str, str]] = {
    3: ("cudaErrorInitializationError", "CUDA_ERROR_NOT_INITIALIZED",
        "initialization error: the driver could not set up CUDA"),
    34: ("cudaErrorStubLibrary", "CUDA_ERROR_STUB_LIBRARY",
         "stub library: the CUDA toolkit's stub libcuda.so is loaded instead of the driver's"),
    35: ("cudaErrorInsufficientDriver", "",  # runtime API only
         "insufficient driver: the driver is missing or older than the CUDA runtime needs"),
    46: ("cudaErrorDevicesUnavailable", "CUDA_ERROR_DEVICE_UNAVAILABLE",
         "devices unavailable: busy, exclusive-process mode, or held by another process"),
    100: ("cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE",
          "no device: no CUDA-capable GPU is visible (check CUDA_VISIBLE_DEVICES)"),
    802: ("cudaErrorSystemNotReady", "CUDA_ERROR_SYSTEM_NOT_READY",
          "system not ready: the driver or the NVSwitch fabric manager is still initialising"),
    803: ("cudaErrorSystemDriverMismatch", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
          "driver mismatch: the user-space driver (libcuda, e.g. a cuda-compat package) does not "
          "match the kernel module"),
    804: ("cudaErrorCompatNotSupportedOnDevice", "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
          "forward compatibility not supported on this GPU: remove cuda-compat from the library path"),
    999: ("cudaErrorUnknown", "CUDA_ERROR_UNKNOWN", "unknown error: often a driver or GPU fault"),
}

# Codes a later, fresh process may not see: a node warming up, a busy device.
RETRYABLE = frozenset({3, 46, 802, 999})


def describe(code: int | None, api: str = "runtime", name: str | None = None) -> str:
    """'802 cudaErrorSystemNotReady (system not ready: ...)' for a message."""
    if code is None:
        return "no result"
    known = CUDA_ERRORS.get(code)
    label = name or (known[0 if api == "runtime" else 1] if known else None)
    meaning = known[2] if known else None
    text = f"{code} {label}" if label else f"error {code}"
    return f"{text} ({meaning})" if meaning else text


def short(code: int | None, api: str = "runtime") -> str:
    """'802 system not ready' for lists of attempts."""
    if code is None:
        return "no result"
    known = CUDA_ERRORS.get(code)
    return f"{code} {known[2].split(':')[0]}" if known else f"error {code}"
