"""What chat's ``/?``, ``/? set``, ``/? show``, ``/set parameter`` and ``/? shortcuts`` print.

The texts follow ``ollama run``'s, less what local-eagle chat does not have; kept apart from the
session logic in :mod:`local_eagle.cli.chat` so that module reads as behaviour.
"""

from __future__ import annotations

HELP = """Available Commands:
  /set            Set session variables
  /show           Show model information
  /stats          Show acceptance and speed for this session
  /clear          Clear session context
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message.
"""

SET_HELP = """Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
"""

SHOW_HELP = """Available Commands:
  /show info         Show details for this model
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template
"""

PARAMETER_HELP = """Available Parameters:
  /set parameter seed <int>               Random number seed
  /set parameter num_predict <int>        Max number of tokens to predict (-1: until the context is full)
  /set parameter top_k <int>              Pick from top k num of tokens
  /set parameter top_p <float>            Pick token based on sum of probabilities
  /set parameter min_p <float>            Pick token based on top token probability * min_p
  /set parameter num_ctx <int>            Set the context size (reloads the model)
  /set parameter temperature <float>      Set creativity level (0: greedy)
  /set parameter repeat_penalty <float>   How strongly to penalize repetitions
  /set parameter repeat_last_n <int>      Set how far back to look for penalties
  /set parameter num_gpu <int>            The number of layers to send to the GPU (reloads the model)
  /set parameter num_thread <int>         CPU threads (reloads the model)
  /set parameter draft_num_predict <int>  Most tokens drafted per step (0: no drafting)
  /set parameter stop <string> <string> ...   Set the stop parameters
"""

SHORTCUTS_HELP = """Available keyboard shortcuts:
  Ctrl + c            Stop the answer being generated
  Ctrl + d            Exit (on an empty prompt)
  Up / Down           Previous / next input (where Python has readline)
"""

COMMANDS = ("/set", "/show", "/stats", "/clear", "/bye", "/exit", "/?", "/help")
# Ollama /set options local-eagle chat does not have
UNSUPPORTED_SET = ("history", "nohistory", "wordwrap", "nowordwrap", "format", "noformat", "think", "nothink")
