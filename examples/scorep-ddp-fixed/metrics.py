"""Loss logging that never stalls the GPU: the device-to-host copy runs on a side stream."""

from __future__ import annotations

import torch


class AsyncLossLogger:
    def __init__(self, device: torch.device):
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.host = torch.zeros(1, pin_memory=self.stream is not None)
        self.event = None

    def push(self, loss: torch.Tensor) -> None:
        """Start copying `loss` to the host; `value()` waits for it."""
        if self.stream is None:
            self.host.copy_(loss.detach().reshape(1))
            return
        producer = torch.cuda.current_stream(self.device)  # captured before the context switches it
        stream = self.stream
        with torch.cuda.stream(stream):
            stream.wait_stream(producer)
            self.host.copy_(loss.detach().reshape(1), non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(stream)

    def value(self) -> float:
        if self.event is not None:
            self.event.synchronize()
        return float(self.host[0])
