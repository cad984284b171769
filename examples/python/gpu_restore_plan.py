#!/usr/bin/env python3
"""A plan-driven restore into device memory, against the bus (issue 28, point 5).

A Llama-3-8B-shaped prefix (32 layers, 8 KV heads x 128 dims, float16: 128 KiB
per token; 8,192 tokens = 1 GiB by default, 256-token blocks) is stored in the
hot tier. Then:

1. the pinned host->device bandwidth is measured: one copy of the same number
   of bytes from a page-locked torch tensor into device memory (the limit);
2. the engine's memory regions (engine.memory_regions()) are registered with
   cudaHostRegister, once, so the device's copy engine can read the hot
   blocks where they live;
3. engine.plan_restore(match) lists, per layer, the host ranges that hold the
   layer's bytes; each range is handed to cudaMemcpy2DAsync (the copy engine
   gathers the blocks straight into one device buffer per layer: no CPU copy
   of the bytes at all). The time from the first copy to the last one's
   completion is the plan-driven restore;
4. every byte on the device is compared with the arrays that were stored
   (exit 1 on any difference), then the plan is released and the regions
   unregistered before the engine closes.

It prints the ratio of the plan-driven restore's bandwidth to the pinned
bandwidth, against issue 28's goal of at least 0.7.

Without a CUDA device (or without torch's CUDA build) the same plan is
applied on the CPU, range by range through torch copies of zero-copy views of
the engine's memory, and checked byte for byte: the example's logic runs
everywhere (python/tests/test_torch.py runs it that way), but only a GPU
gives the bandwidth figure.

Run: tools/run python examples/python/gpu_restore_plan.py [--tokens 8192]
     [--repeats 5] [--require-goal]
docs/python.md, "A restore plan for DMA", explains the calls.
"""
import argparse
import ctypes
import glob
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import prefixkv

try:
    import torch
except ImportError:  # the example needs torch for the device side
    sys.exit("gpu_restore_plan.py needs PyTorch (Debian: python3-torch)")

LAYERS, KV_HEADS, HEAD_DIM, BLOCK_TOKENS = 32, 8, 128, 256
CUDA_MEMCPY_HOST_TO_DEVICE = 1


def load_cudart():
    """The CUDA runtime torch uses, for cudaMemcpy2DAsync (torch does not
    expose a strided host->device copy of raw addresses). None if not found."""
    names = []
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    names += sorted(glob.glob(os.path.join(torch_lib, "libcudart*.so*")))
    try:  # pip wheels ship the runtime in the nvidia-cuda-runtime package
        import nvidia.cuda_runtime
        lib = os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib")
        names += sorted(glob.glob(os.path.join(lib, "libcudart.so*")))
    except ImportError:
        pass
    names += ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"]
    for name in names:
        try:
            rt = ctypes.CDLL(name)
        except OSError:
            continue
        rt.cudaMemcpy2DAsync.restype = ctypes.c_int
        rt.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                         ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                         ctypes.c_int, ctypes.c_void_p]
        rt.cudaHostRegister.restype = ctypes.c_int
        rt.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        rt.cudaHostUnregister.restype = ctypes.c_int
        rt.cudaHostUnregister.argtypes = [ctypes.c_void_p]
        return rt
    return None


def host_view(address, nbytes):
    """A uint8 CPU tensor over `nbytes` of the engine's memory at `address`,
    without a copy (valid while the plan holds its pins)."""
    return torch.frombuffer((ctypes.c_ubyte * nbytes).from_address(address),
                            dtype=torch.uint8)


def apply_plan(plan_layers, dests, rt, stream):
    """Gathers every planned range into its layer's destination buffer: one
    cudaMemcpy2DAsync per range on a GPU with the runtime at hand, else one
    torch copy per chunk (count chunks of `bytes`, src_stride apart)."""
    for layer, dest in zip(plan_layers, dests):
        for src, nbytes, count, src_stride, dst_offset, dst_stride in layer["ranges"]:
            if rt is not None:
                err = rt.cudaMemcpy2DAsync(
                    ctypes.c_void_p(dest.data_ptr() + dst_offset),
                    dst_stride if count > 1 else nbytes, ctypes.c_void_p(src),
                    src_stride if count > 1 else nbytes, nbytes, count,
                    CUDA_MEMCPY_HOST_TO_DEVICE, ctypes.c_void_p(stream))
                if err != 0:
                    raise RuntimeError(f"cudaMemcpy2DAsync failed: error {err}")
                continue
            for i in range(count):
                d = dst_offset + i * dst_stride
                dest[d:d + nbytes].copy_(host_view(src + i * src_stride, nbytes),
                                         non_blocking=dest.is_cuda)


def check_layers(plan_layers, dests, stored):
    """Every planned tensor on the device equals the stored array, bit for bit."""
    for l, (layer, dest) in enumerate(zip(plan_layers, dests)):
        got = dest.cpu().numpy()
        for t, (dtype, shape, offset, nbytes) in enumerate(layer["tensors"]):
            want = stored[l][t]
            if dtype != "float16" or tuple(shape) != want.shape:
                return f"layer {l} tensor {t}: planned {dtype} {shape}, stored {want.shape}"
            if not np.array_equal(got[offset:offset + nbytes].view(np.uint16).reshape(shape),
                                  want.view(np.uint16)):
                return f"layer {l} tensor {t}: the bytes differ"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192,
                    help="prefix length (128 KiB per token; default 8192 = 1 GiB); "
                         "a multiple of 256")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (median)")
    ap.add_argument("--cpu", action="store_true", help="apply the plan on the CPU even "
                    "when a GPU is present")
    ap.add_argument("--require-goal", action="store_true",
                    help="exit 2 when the ratio is under 0.7 on a GPU")
    args = ap.parse_args()
    if args.tokens <= 0 or args.tokens % BLOCK_TOKENS or args.repeats < 1:
        ap.error(f"--tokens must be a positive multiple of {BLOCK_TOKENS}, --repeats >= 1")

    gpu = torch.cuda.is_available() and not args.cpu
    rt = load_cudart() if gpu else None
    device = torch.device("cuda") if gpu else torch.device("cpu")
    per_layer = 2 * KV_HEADS * args.tokens * HEAD_DIM * 2
    total = per_layer * LAYERS
    print(f"prefix: {args.tokens} tokens, {LAYERS} layers, {total / 2**20:.0f} MiB; "
          f"device: {torch.cuda.get_device_name() if gpu else 'none (CPU check only)'}"
          + ("" if rt is not None or not gpu else "; no libcudart for ctypes: "
             "chunk-by-chunk torch copies"))

    rng = np.random.default_rng(11)
    stored = [[rng.integers(0, 1 << 16, (1, KV_HEADS, args.tokens, HEAD_DIM),
                            dtype=np.uint16).view(np.float16) for _ in range(2)]
              for _ in range(LAYERS)]
    tokens = list(range(args.tokens))
    with tempfile.TemporaryDirectory() as data_dir, prefixkv.Engine.open(
            data_dir=data_dir, hot_bytes=total + total // 4, quiet=True) as engine:
        ns = engine.register_model("llama-3-8b-shaped", ["KVCache"] * LAYERS,
                                   block_tokens=BLOCK_TOKENS, dtype="float16")
        engine.store(ns, tokens, stored)

        regions = engine.memory_regions()
        registered = []
        if rt is not None:
            t0 = time.perf_counter()
            for base, size in regions:
                if rt.cudaHostRegister(ctypes.c_void_p(base), size, 0) == 0:
                    registered.append(base)
            print(f"registered {len(registered)} of {len(regions)} regions "
                  f"({sum(s for _, s in regions) / 2**20:.0f} MiB) in "
                  f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
        try:
            plan = engine.plan_restore(engine.match(ns, tokens))
            layers = plan.layers
            ranges = sum(len(layer["ranges"]) for layer in layers)
            if plan.restored_tokens != args.tokens:
                print(f"FAIL: the plan covers {plan.restored_tokens} of {args.tokens} tokens")
                return 1
            dests = [torch.empty(layer["bytes"], dtype=torch.uint8, device=device)
                     for layer in layers]
            stream = torch.cuda.current_stream().cuda_stream if gpu else None
            plan_s = []
            for _ in range(args.repeats):
                if gpu:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                apply_plan(layers, dests, rt, stream)
                if gpu:
                    torch.cuda.synchronize()
                plan_s.append(time.perf_counter() - t0)
            problem = check_layers(layers, dests, stored)
            plan.release()
        finally:
            for base in registered:
                rt.cudaHostUnregister(ctypes.c_void_p(base))
        if problem:
            print(f"FAIL: {problem}")
            return 1
        print(f"plan: {ranges} ranges over {len(layers)} layers; every byte on the "
              f"{'device' if gpu else 'CPU'} equals the stored arrays")
        plan_gb_s = total / statistics.median(plan_s) / 1e9
        if not gpu:
            print(f"plan applied on the CPU: {plan_gb_s:.2f} GB/s (no GPU: the goal "
                  f"needs a device to measure)")
            return 0

        pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
        device_buf = torch.empty(total, dtype=torch.uint8, device=device)
        pinned_s = []
        for _ in range(args.repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            device_buf.copy_(pinned, non_blocking=True)
            torch.cuda.synchronize()
            pinned_s.append(time.perf_counter() - t0)
        pinned_gb_s = total / statistics.median(pinned_s) / 1e9
        ratio = plan_gb_s / pinned_gb_s
        print(f"pinned host->device: {pinned_gb_s:.1f} GB/s (median of {args.repeats}; "
              f"{min(pinned_s) * 1e3:.1f}-{max(pinned_s) * 1e3:.1f} ms)")
        print(f"plan-driven restore: {plan_gb_s:.1f} GB/s (median of {args.repeats}; "
              f"{min(plan_s) * 1e3:.1f}-{max(plan_s) * 1e3:.1f} ms)")
        print(f"ratio: {ratio:.2f} of pinned (goal >= 0.7: "
              f"{'met' if ratio >= 0.7 else 'NOT met'})")
        return 2 if args.require_goal and ratio < 0.7 else 0


if __name__ == "__main__":
    sys.exit(main())
