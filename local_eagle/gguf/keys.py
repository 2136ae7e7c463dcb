"""The GGUF key schema of an ``eagle3`` drafter: llama.cpp's own keys and the EAGLE 3.1 keys of ours.

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

# keys of our own (stock llama.cpp ignores them)
KEY_FC_NORM = f"{DRAFTER_ARCH}.fc_norm"
KEY_FC_NORM_WEIGHT = f"{DRAFTER_ARCH}.fc_norm.weight"
KEY_FC_NORM_EPS = f"{DRAFTER_ARCH}.fc_norm.epsilon"
KEY_NORM_OUTPUT = f"{DRAFTER_ARCH}.norm_output"
KEY_DRAFT_VOCAB = f"{DRAFTER_ARCH}.draft_vocab_size"
KEY_SOURCE_FORMAT = f"{DRAFTER_ARCH}.source_format"
