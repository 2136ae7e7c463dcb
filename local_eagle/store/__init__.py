"""local-eagle's own model store: names instead of paths, as ``ollama create`` / ``ollama run`` use them.

:mod:`local_eagle.store.models` keeps the entries (a Modelfile with resolved paths and references to
the GGUFs, never copies of them); :mod:`local_eagle.store.resolve` turns a name into a Modelfile,
looking in this store first and then in Ollama's (read-only); :mod:`local_eagle.store.summary`
describes an entry as ``ollama show`` does.
"""

from local_eagle.store.models import Entry, FileRef, LocalStore, StoreEntryError, default_root
from local_eagle.store.resolve import NamedStores, is_model_name, resolve_name

__all__ = ["Entry", "FileRef", "LocalStore", "NamedStores", "StoreEntryError", "default_root", "is_model_name",
           "resolve_name"]  # fmt: skip
