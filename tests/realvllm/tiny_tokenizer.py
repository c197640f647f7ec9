"""A small byte-level BPE tokenizer trained on the training pairs, with ChatML and InternVL's tokens.

The chat template is Qwen's ChatML. A message's content may be a string (vLLM's `string` content
format, which has already put `<IMG_CONTEXT>` where the image goes) or a list of parts (the
`openai` format): text parts are joined by newlines and an image part becomes `<IMG_CONTEXT>`,
the token InternVLProcessor expands into `<img>` + tiles x image_seq_length context tokens + `</img>`.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
SPECIAL_TOKENS = [PAD, IM_START, IM_END, *IMAGE_TOKENS.values()]
IMAGE_PLACEHOLDER = IMAGE_TOKENS["context_image_token"]

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if not loop.first -%}{{ '\n' }}{%- endif -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- elif part['type'] in ['image', 'image_url', 'image_pil'] -%}{{ '<IMG_CONTEXT>' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE over `texts` (words split first); the special tokens take the first ids.

    Loaded from a saved model folder, transformers builds the tokenizer its model type names
    (Qwen2Tokenizer: Qwen's own word-splitting pattern over these merges), so the kit trains with
    the reloaded tokenizer, the one vLLM uses too."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def build_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """The wrapped tokenizer: eos `<|im_end|>`, pad `<|endoftext|>`, InternVL's image tokens named."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(texts, vocab_size),
        eos_token=IM_END,
        pad_token=PAD,
        extra_special_tokens=dict(IMAGE_TOKENS),
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END, *IMAGE_TOKENS.values()]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
