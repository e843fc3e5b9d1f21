"""How a chat's messages become the prompt a model was trained on: a Jinja template, or one of llama.cpp's own.

choose(options, metadata, builtin_names) picks, in this order:
  1. engine_kwargs["chat_template"]: Jinja text, rendered as llama-cpp-python renders a GGUF's template;
  2. engine_kwargs["chat_format"]: the name of a template built into llama.cpp (llama_chat_builtin_templates());
  3. the GGUF's tokenizer.chat_template (Jinja);
  4. the built-in template of the model's family (general.architecture: gemma* -> "gemma", qwen* -> "chatml",
     phi3 -> "phi3", ...), for GGUF files written without a template;
  5. "chatml", the template llama.cpp's own server falls back to.
A template's render(messages) gives a Rendered(prompt, add_bos, stops); a template that rejects the messages (a
role order it does not allow, say) raises TemplateError with its reason.

JinjaTemplate is thread-safe; BuiltinTemplate calls into llama.cpp (thread-safe: no model state).
"""

import ctypes
import dataclasses
from typing import Tuple

FAMILY_TEMPLATES = (  # (general.architecture prefix, llama.cpp built-in template)
    ("gemma", "gemma"), ("qwen", "chatml"), ("phi3", "phi3"), ("phi4", "phi4"), ("deepseek2", "deepseek2"),
    ("exaone", "exaone3"), ("granite", "granite"), ("command-r", "command-r"), ("chatglm", "chatglm4"),
)
FALLBACK_TEMPLATE = "chatml"


class TemplateError(ValueError):
    """The template cannot render these messages."""


@dataclasses.dataclass(frozen=True)
class Rendered:
    prompt: str
    add_bos: bool            # whether the tokenizer should add BOS (the template did not write it)
    stops: Tuple[str, ...]   # strings that end the reply besides the model's end-of-generation tokens


class JinjaTemplate:
    def __init__(self, text, bos_token, eos_token, origin):
        from llama_cpp import llama_chat_format
        self.origin = origin
        self._formatter = llama_chat_format.Jinja2ChatFormatter(template=text, bos_token=bos_token,
                                                                eos_token=eos_token)
        self._eos = eos_token

    def render(self, messages):
        try:
            result = self._formatter(messages=[{"role": r, "content": c} for r, c in messages])
        except Exception as e:  # jinja2's errors and the template's raise_exception(...)
            raise TemplateError(f"the chat template ({self.origin}) rejected the messages: {e}") from e
        return Rendered(prompt=result.prompt, add_bos=not result.added_special,
                        stops=(self._eos,) if self._eos else ())


class BuiltinTemplate:
    def __init__(self, name, origin):
        self.name = name
        self.origin = origin

    def render(self, messages):
        import llama_cpp
        items = [llama_cpp.llama_chat_message(role.encode(), text.encode()) for role, text in messages]
        chat = (llama_cpp.llama_chat_message * len(items))(*items)
        name = self.name.encode()
        size = llama_cpp.llama_chat_apply_template(name, chat, len(items), True, None, 0)
        if size < 0:
            raise TemplateError(f"llama.cpp's {self.name!r} template cannot render these messages")
        buffer = ctypes.create_string_buffer(size + 1)
        size = llama_cpp.llama_chat_apply_template(name, chat, len(items), True, buffer, size + 1)
        return Rendered(prompt=buffer.raw[:size].decode("utf-8", errors="replace"), add_bos=True, stops=())


def builtin_names():
    """The names of llama.cpp's built-in chat templates."""
    import llama_cpp
    count = llama_cpp.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * count)()
    llama_cpp.llama_chat_builtin_templates(names, count)
    return [n.decode() for n in names]


def family_template(architecture):
    for prefix, name in FAMILY_TEMPLATES:
        if architecture.startswith(prefix):
            return name
    return None


def choose(options, metadata, bos_token, eos_token, builtin):
    """The template for a model: `options` (engine_options.EngineOptions), its GGUF `metadata`, its BOS/EOS texts
    and the built-in template names; ValueError naming engine_kwargs["chat_format"] when it is not one of them."""
    if options.chat_template is not None:
        return JinjaTemplate(options.chat_template, bos_token, eos_token, "engine_kwargs['chat_template']")
    if options.chat_format is not None:
        if options.chat_format not in builtin:
            raise ValueError(f"engine_kwargs['chat_format']: {options.chat_format!r} is not a llama.cpp template; "
                             f"accepted: {', '.join(builtin)}")
        return BuiltinTemplate(options.chat_format, "engine_kwargs['chat_format']")
    gguf = metadata.get("tokenizer.chat_template")
    if gguf:
        return JinjaTemplate(gguf, bos_token, eos_token, "the GGUF's tokenizer.chat_template")
    architecture = metadata.get("general.architecture", "")
    name = family_template(architecture)
    if name is not None:
        return BuiltinTemplate(name, f"llama.cpp's {name!r}, for general.architecture {architecture!r}")
    return BuiltinTemplate(FALLBACK_TEMPLATE, f"llama.cpp's {FALLBACK_TEMPLATE!r} (the GGUF has no template)")
