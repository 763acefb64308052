# Stands in for a module that initialises CUDA at import (no GPU here): the
# zygote must see torch.cuda.is_initialized() and refuse to fork from it.
import torch

torch.cuda.is_initialized = lambda: True
