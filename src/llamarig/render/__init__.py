"""Render a planned or checked llama-server command as a bash launcher, a systemd unit, a
docker compose service or a llama-swap entry; launch/stop/verify it (launch.py)."""
