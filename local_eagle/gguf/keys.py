"""The GGUF key schema of an ``eagle3`` drafter (llama.cpp's own keys and the EAGLE 3.1 keys of ours) and of a
``dflash`` block drafter.

Every GGUF key the package reads or writes is spelled once: llama.cpp's standard keys by gguf-py's ``gguf.Keys``,
the rest here, so that a renamed key is one edit and a typo cannot read as a missing key.

Stock llama.cpp 0.3.36 ignores the keys of ours; the runtime applies FC norm and the post-norm
feedback on the host from them (docs/architecture.md, "EAGLE 3.1 on llama.cpp").
"""

DRAFTER_ARCH = "eagle3"

# llama.cpp's llama_ftype, the value of general.file_type, as Ollama names it (fs/ggml/type.go): what a model
# calls its quantization (a Q4_K_M file keeps its embeddings at Q8_0 or Q6_K, so its biggest type says less)
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}  # fmt: skip

KEY_TARGET_LAYERS = f"{DRAFTER_ARCH}.target_layers"
KEY_TARGET_HIDDEN = f"{DRAFTER_ARCH}.target_hidden_size"
KEY_RMS_EPS = f"{DRAFTER_ARCH}.attention.layer_norm_rms_epsilon"
KEY_VOCAB_SIZE = f"{DRAFTER_ARCH}.vocab_size"

# keys of our own (stock llama.cpp ignores them)
KEY_FC_NORM = f"{DRAFTER_ARCH}.fc_norm"
KEY_FC_NORM_WEIGHT = f"{DRAFTER_ARCH}.fc_norm.weight"
KEY_FC_NORM_EPS = f"{DRAFTER_ARCH}.fc_norm.epsilon"
KEY_NORM_OUTPUT = f"{DRAFTER_ARCH}.norm_output"
KEY_NORM_BEFORE_FC = f"{DRAFTER_ARCH}.norm_before_fc"
KEY_NORM_BEFORE_RESIDUAL = f"{DRAFTER_ARCH}.norm_before_residual"
KEY_DRAFT_VOCAB = f"{DRAFTER_ARCH}.draft_vocab_size"
KEY_SOURCE_FORMAT = f"{DRAFTER_ARCH}.source_format"
KEY_SOURCE_ROPE_SCALING = f"{DRAFTER_ARCH}.source_rope_scaling"  # the checkpoint's rope_scaling, for export

# The block drafters' architecture (DFlash, DFlash2 and DSpark are one GGUF architecture in llama.cpp) and the keys
# of its own that llama.cpp's converter writes (conversion/qwen.py DFlashModel; src/models/dflash.cpp reads them)
BLOCK_DRAFTER_ARCH = "dflash"
KEY_DFLASH_TARGET_LAYERS = f"{BLOCK_DRAFTER_ARCH}.target_layers"
KEY_DFLASH_TARGET_HIDDEN = f"{BLOCK_DRAFTER_ARCH}.target_hidden_size"
KEY_DFLASH_BLOCK_SIZE = f"{BLOCK_DRAFTER_ARCH}.block_size"
KEY_DFLASH_MASK_TOKEN = f"{BLOCK_DRAFTER_ARCH}.mask_token_id"
KEY_DFLASH_HAS_CONFIDENCE_HEAD = f"{BLOCK_DRAFTER_ARCH}.has_confidence_head"
KEY_DFLASH_CAUSAL = f"{BLOCK_DRAFTER_ARCH}.attention.causal"
KEY_DFLASH_SAMPLE_FROM_ANCHOR = f"{BLOCK_DRAFTER_ARCH}.sample_from_anchor"
KEY_DFLASH_SELECTOR_TOP_K = f"{BLOCK_DRAFTER_ARCH}.selector_top_k"
KEY_DFLASH_CONV_KERNEL = f"{BLOCK_DRAFTER_ARCH}.conv_kernel_size"
"""DFlash2's per-layer dynamic convolutions: a file with this key is a DFlash2 drafter."""
TENSOR_DSPARK_MARKOV = "markov_w1.weight"
"""DSpark's Markov head (``markov_w1``): a file with this tensor is a DSpark drafter."""

# the drafter families, as the catalog names them (``family``) and as people read them
FAMILY_NAMES = {"eagle3": "EAGLE 3", "eagle3.1": "EAGLE 3.1", "mtp": "MTP", "dflash": "DFlash", "dflash2": "DFlash2",
                "dspark": "DSpark"}  # fmt: skip
BLOCK_FAMILIES = frozenset({"dflash", "dflash2", "dspark"})
UNDRAFTED_FAMILIES: frozenset[str] = frozenset()
"""Block families converted, described and priced but not drafted with: none now (DFlash, DSpark and DFlash2 all
draft, ``runtime.dflash``)."""
"""Families that draft a whole block per forward pass (``dflash`` GGUFs), all drafted (``runtime.dflash``)."""

# llama.cpp's standard keys are gguf-py's ``gguf.Keys`` (``Keys.LLM.CONTEXT_LENGTH.format(arch=...)``); the few
# below are llama.cpp's or Ollama's too, but gguf-py 0.17 (the oldest the package allows) does not name them
KEY_PARAMETER_COUNT = "general.parameter_count"
"""Ollama's ``/api/show`` ``model_info`` entry for the weights' count (not in the file: Ollama counts it)."""
KEY_NEXTN_PREDICT_LAYERS = "{arch}.nextn_predict_layers"
KEY_RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"

# DeepSeek V4's keys (src/llama-arch.cpp LLM_KV_*), which the installed gguf-py does not name yet: the tiny
# DeepSeek V4 fixture writes them
KEY_DSV4_SWIGLU_CLAMP_EXP = "{arch}.swiglu_clamp_exp"
KEY_DSV4_INDEXER_HEAD_COUNT = "{arch}.attention.indexer.head_count"
KEY_DSV4_INDEXER_KEY_LENGTH = "{arch}.attention.indexer.key_length"
KEY_DSV4_INDEXER_TOP_K = "{arch}.attention.indexer.top_k"
KEY_DSV4_OUTPUT_GROUP_COUNT = "{arch}.attention.output_group_count"
KEY_DSV4_OUTPUT_LORA_RANK = "{arch}.attention.output_lora_rank"
KEY_DSV4_COMPRESS_ROPE_FREQ_BASE = "{arch}.attention.compress_rope_freq_base"
KEY_DSV4_COMPRESS_RATIOS = "{arch}.attention.compress_ratios"
KEY_DSV4_HC_COUNT = "{arch}.hyper_connection.count"
KEY_DSV4_HC_SINKHORN_ITERATIONS = "{arch}.hyper_connection.sinkhorn_iterations"
KEY_DSV4_HC_EPSILON = "{arch}.hyper_connection.epsilon"
KEY_DSV4_HASH_LAYER_COUNT = "{arch}.hash_layer_count"
