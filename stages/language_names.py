"""Whisper's languages by English name, so a name where a code belongs gets its code
suggested (``--source-lang spanish``: "use es"). Whisper's own table (openai/whisper
``tokenizer.LANGUAGES``) plus its aliases and a few native names; a leaf module."""

from __future__ import annotations

import difflib

__all__ = ["LANGUAGE_NAMES", "language_hint"]

LANGUAGE_NAMES: dict[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian",
    "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian",
    "sw": "swahili", "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala",
    "km": "khmer", "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans",
    "oc": "occitan", "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi",
    "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek",
    "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk",
    "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan",
    "tl": "tagalog", "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian",
    "ln": "lingala", "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese",
    "yue": "cantonese",
}
_OTHER_NAMES = {  # Whisper's aliases, then what people type in their own language
    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht",
    "letzeburgesch": "lb", "pushto": "ps", "panjabi": "pa", "moldavian": "ro",
    "moldovan": "ro", "sinhalese": "si", "castilian": "es", "mandarin": "zh",
    "deutsch": "de", "español": "es", "espanol": "es", "français": "fr", "francais": "fr",
    "italiano": "it", "português": "pt", "portugues": "pt", "nederlands": "nl",
    "polski": "pl", "русский": "ru", "中文": "zh", "日本語": "ja", "한국어": "ko",
}
_BY_NAME = {name: code for code, name in LANGUAGE_NAMES.items()} | _OTHER_NAMES


def language_hint(text: str) -> str:
    """For a language that is not a Whisper code: the code it names ("use es for
    spanish"), or the nearest codes and names, or "" when nothing is near."""
    key = text.strip().lower()
    code = _BY_NAME.get(key)
    if code is not None:
        return f"use {code} ({LANGUAGE_NAMES[code]})"
    near = difflib.get_close_matches(key, [*_BY_NAME, *LANGUAGE_NAMES], n=3, cutoff=0.75)
    codes = list(dict.fromkeys(_BY_NAME.get(item, item) for item in near))
    if not codes:
        return ""
    return "did you mean " + " or ".join(f"{c} ({LANGUAGE_NAMES[c]})" for c in codes) + "?"
