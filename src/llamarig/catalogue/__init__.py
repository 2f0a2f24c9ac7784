"""The built-in catalogues: models (catalogue.models) and GPUs (catalogue.gpus), each entry with its public source."""
