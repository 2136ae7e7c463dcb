"""The staging API of llama.cpp's ``src/llama-ext.h``, which libllama exports under C++-mangled names only.

llama-cpp-python does not bind it, so it is bound here by those names, each with its C
prototype. A symbol is resolved on first use: a libllama without it is a one-line error, not
a crash, and ``available`` lets ``local-eagle doctor`` report which ones are missing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from local_eagle.errors import LlamaError
from local_eagle.llamacpp import lib

_context = ctypes.c_void_p
_model = ctypes.c_void_p
_f32_pointer = ctypes.POINTER(ctypes.c_float)
_i32_pointer = ctypes.POINTER(ctypes.c_int32)

# name -> (mangled symbol, argtypes, restype); mangling per the Itanium C++ ABI of llama-ext.h
STAGING: dict[str, tuple[str, list, object]] = {
    "set_embeddings_nextn": (
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        [_context, ctypes.c_bool, ctypes.c_bool],
        None,
    ),
    "get_embeddings_nextn": ("_Z26llama_get_embeddings_nextnP13llama_context", [_context], _f32_pointer),
    "get_embeddings_nextn_ith": (
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        [_context, ctypes.c_int32],
        _f32_pointer,
    ),
    "set_embeddings_layer_inp": (
        "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        [_context, ctypes.c_uint32, ctypes.c_bool],
        None,
    ),
    "get_embeddings_layer_inp": (
        "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
        [_context, ctypes.c_uint32],
        _f32_pointer,
    ),
    # MTP (NextN) drafting: which appended NextN block an MTP context's graph runs (il = n_layer + offset)
    "set_nextn_layer_offset": (
        "_Z28llama_set_nextn_layer_offsetP13llama_contexti",
        [_context, ctypes.c_int32],
        None,
    ),
    "get_ctx_other": ("_Z19llama_get_ctx_otherP13llama_context", [_context], ctypes.c_void_p),
    "model_target_layer_ids": ("_Z28llama_model_target_layer_idsPK11llama_model", [_model], _i32_pointer),
    "model_target_layer_ids_n": (
        "_Z30llama_model_target_layer_ids_nPK11llama_model",
        [_model],
        ctypes.c_uint32,
    ),
    # DFlash2: the selector's candidates per block row (0: no selector, a DFlash or DSpark drafter)
    "model_dflash_selector_top_k": ("_Z33llama_model_dflash_selector_top_kPK11llama_model", [_model], ctypes.c_int32),
}


class _Staging:
    """The staging functions as attributes (``staging.get_embeddings_nextn(ctx)``), resolved lazily."""

    def __init__(self) -> None:
        self._functions: dict[str, Callable] = {}

    def available(self) -> dict[str, bool]:
        lib.require_llama()
        return {name: hasattr(lib.C._lib, symbol) for name, (symbol, _, _) in STAGING.items()}

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_"):
            raise AttributeError(name)
        function = self._functions.get(name)
        if function is None:
            lib.require_llama()
            symbol, argtypes, restype = STAGING[name]
            try:
                function = getattr(lib.C._lib, symbol)
            except AttributeError:
                raise LlamaError(
                    f"libllama lacks the staging symbol llama_{name} ({symbol}); local-eagle needs "
                    f"llama-cpp-python=={lib.PINNED_VERSION}"
                ) from None
            function.argtypes = argtypes
            function.restype = restype
            self._functions[name] = function
        setattr(self, name, function)  # later lookups find the attribute, without a __getattr__ call per use
        return function


staging = _Staging()
