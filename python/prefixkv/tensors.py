"""numpy <-> torch without a copy (docs/python.md, "torch and bfloat16").

Restored arrays are read-only numpy arrays viewing the engine's buffers.
``as_torch`` gives a torch tensor sharing their memory; ``as_numpy`` is what
``Engine.store`` and ``encode_block`` apply to a torch tensor they are given.
bfloat16 travels as its raw 16 bits: numpy has no bfloat16, so a bfloat16
namespace stores and restores ``uint16`` arrays, and these two functions map
them to and from ``torch.bfloat16`` (same bits, same memory).

torch is imported only when a torch tensor is given or asked for; numpy-only
users never import it.
"""
import sys
import warnings

import numpy as np

from .errors import InvalidArgument


def as_numpy(tensor, what="tensor"):
    """A numpy array viewing ``tensor`` (no copy): the array itself, or a CPU
    torch tensor's memory (``torch.bfloat16``: its bits as ``uint16``).
    InvalidArgument for anything else (a GPU tensor: ``.cpu()`` it first)."""
    if isinstance(tensor, np.ndarray):
        return tensor
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor):
        raise InvalidArgument(f"{what}: not a numpy array or torch tensor "
                              f"({type(tensor).__name__})", "InvalidArgument")
    if tensor.device.type != "cpu":
        raise InvalidArgument(f"{what}: a torch tensor on {tensor.device}; only CPU "
                              "tensors are viewed (.cpu() copies it)", "InvalidArgument")
    tensor = tensor.detach()
    # torch refuses a numpy view of a sparse tensor, a quantized one or a
    # lazily negated one (torch.conj(z).imag) with its own TypeError or
    # RuntimeError, which "except prefixkv.Error" missed (python.md: every
    # failure is one), naming no layer or tensor.
    try:
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(np.uint16)
        return tensor.numpy()
    except (TypeError, RuntimeError) as error:
        raise InvalidArgument(f"{what}: torch gives no numpy view of this tensor "
                              f"({error})", "InvalidArgument") from error


def as_torch(array, *, bfloat16=None):
    """A torch tensor sharing ``array``'s memory (same ``data_ptr``; no copy).

    ``uint16`` arrays (a bfloat16 namespace's bits) become ``torch.bfloat16``
    unless ``bfloat16=False``. Read-only arrays (every restored array) give a
    tensor torch lets you write: don't; the bytes are the engine's. numpy 1.24
    refuses ``torch.from_dlpack`` on read-only arrays, so this goes through
    ``torch.from_numpy``."""
    import torch  # pylint: disable=import-outside-toplevel
    array = as_numpy(array, "array")
    to_bf16 = array.dtype == np.uint16 if bfloat16 is None else bfloat16
    if to_bf16 and array.dtype != np.uint16:
        raise InvalidArgument(f"array: dtype {array.dtype}; bfloat16 bits are uint16",
                              "InvalidArgument")
    source = array.view(np.int16) if array.dtype == np.uint16 else array
    with warnings.catch_warnings():
        # "The given NumPy array is not writable": expected, see above.
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(source)
    return tensor.view(torch.bfloat16) if to_bf16 else tensor


__all__ = ["as_numpy", "as_torch"]
