"""The live web page of a llama-server (``llamarig top --web``) or a gateway (``/ui``): the data
of ``llamarig top`` (llamarig.top) pushed as server-sent events (``feed``), the page's words
from the message catalogue (``strings``), thresholds and the verdict (``alerts``), and the
static files with the security rules both servers apply (``assets``)."""
