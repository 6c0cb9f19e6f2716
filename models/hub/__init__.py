"""``speechpipe models pull`` through huggingface_hub, with the hub's answers checked first."""
