"""The GGUF key schema of an ``eagle3`` drafter: llama.cpp's own keys and the EAGLE 3.1 keys of ours.

Stock llama.cpp 0.3.36 ignores the keys of ours; the runtime applies FC norm and the post-norm
feedback on the host from them (docs/architecture.md, "EAGLE 3.1 on llama.cpp").
"""

DRAFTER_ARCH = "eagle3"

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
