"""Models and drafters named on the Hugging Face Hub: ``hf.co/USER/REPO[:QUANT][@REV]`` wherever a path works.

:mod:`local_eagle.hub.names` reads the names and picks a repository's files (no network);
:mod:`local_eagle.hub.fetch` brings them into huggingface_hub's cache. Nothing is fetched at import.
"""

from local_eagle.hub.names import HubError, HubRef, is_hub_name, parse_hub_name

__all__ = ["HubError", "HubRef", "is_hub_name", "parse_hub_name"]
