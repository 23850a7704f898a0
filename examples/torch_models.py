"""Small PyTorch models for thrifty's tests and benchmarks (random weights, CPU-sized).

Each builder is deterministic given ``seed``. The ResNet and ViT come from ``transformers``'
configs (``ResNetConfig``, ``ViTConfig``; torchvision and timm do not import with the pinned
CPU PyTorch), GPT-2 from ``GPT2Config``; each is wrapped so that ``model(x)`` returns one
tensor.
"""

from __future__ import annotations

from typing import Any

from torch.nn import functional as F

import torch
from torch import nn


class MLP(nn.Module):
    """Three linear layers with a residual connection, in a ``forward`` of its own."""

    def __init__(self, dim: int = 32, hidden: int = 256, out: int = 10) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(dim, hidden), nn.Linear(hidden, hidden), \
            nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        h = h + torch.relu(self.b(h))
        return self.c(h)


class Residual(nn.Module):
    """A ResNet basic block (conv, batch norm, ReLU, conv, batch norm, skip, ReLU)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False), \
            nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.n1, self.n2 = nn.BatchNorm2d(c), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.n2(self.c2(torch.relu(self.n1(self.c1(x))))))


class ResidualNet(nn.Module):
    def __init__(self, channels: int = 8, blocks: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(Residual(channels) for _ in range(blocks))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(dim=(2, 3)))


class Attention(nn.Module):
    """A pre-norm Transformer block: causal multi-head attention and an MLP, both residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class AttentionNet(nn.Module):
    """``blocks`` attention blocks over an embedding, and a linear head."""

    def __init__(self, dim: int = 32, heads: int = 4, blocks: int = 2, vocab: int = 64,
                 graph_break: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Attention(dim, heads) for _ in range(blocks))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.graph_break = graph_break

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.blocks[0](self.emb(idx))
        if self.graph_break:  # TorchDynamo compiles the code before and after apart
            torch._dynamo.graph_break()
        for b in self.blocks[1:]:
            x = b(x)
        return self.head(self.ln(x))


class Logits(nn.Module):
    """Wraps a ``transformers`` model so that ``model(x)`` is one tensor (the logits)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).logits


def gpt2(layers: int = 2, dim: int = 64, heads: int = 4, vocab: int = 256,
         positions: int = 128) -> nn.Module:
    """GPT-2 from ``transformers.GPT2Config`` (random weights, dropout off)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_embd=dim, n_head=heads, vocab_size=vocab,
                     n_positions=positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     use_cache=False)
    cfg._attn_implementation = "eager"
    return Logits(GPT2LMHeadModel(cfg))


def resnet(depths: tuple[int, ...] = (1, 1), hidden: tuple[int, ...] = (16, 32),
           layer_type: str = "bottleneck", classes: int = 10,
           embedding: int | None = None) -> nn.Module:
    """A ResNet from ``transformers.ResNetConfig``.

    ResNet-50 is :func:`resnet50`: the layout of torchvision's ``resnet50`` (a 7x7 stem of
    64 channels, max pooling, bottleneck stages of 3, 4, 6, 3 blocks of 256, 512, 1024, 2048
    output channels, the stride on each stage's first 3x3 convolution, 25.6 M parameters
    with 1000 classes)."""
    from transformers import ResNetConfig, ResNetForImageClassification

    if embedding is None:
        embedding = hidden[0] // 2 if layer_type == "basic" else 16
    cfg = ResNetConfig(depths=list(depths), hidden_sizes=list(hidden), layer_type=layer_type,
                       embedding_size=embedding, num_labels=classes)
    return Logits(ResNetForImageClassification(cfg))


def resnet50(classes: int = 1000) -> nn.Module:
    """ResNet-50 (random weights), as torchvision defines it (see :func:`resnet`)."""
    return resnet(depths=(3, 4, 6, 3), hidden=(256, 512, 1024, 2048), classes=classes,
                  embedding=64)


def vit(layers: int = 2, dim: int = 64, heads: int = 4, image: int = 32, patch: int = 8,
        classes: int = 10) -> nn.Module:
    """A ViT from ``transformers.ViTConfig`` (random weights, dropout off)."""
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(num_hidden_layers=layers, hidden_size=dim, num_attention_heads=heads,
                    intermediate_size=4 * dim, image_size=image, patch_size=patch,
                    num_labels=classes, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    cfg._attn_implementation = "eager"
    return Logits(ViTForImageClassification(cfg))


def torchvision_resnet(name: str = "resnet50", classes: int = 1000) -> nn.Module:
    """A ResNet of ``torchvision.models`` by name (random weights: ``weights=None``).
    Raises ``ImportError`` where torchvision does not import with the installed PyTorch."""
    import torchvision

    return getattr(torchvision.models, name)(weights=None, num_classes=classes)


def timm_vit(name: str = "vit_base_patch16_224", image: int = 224, **kw: Any) -> nn.Module:
    """A ViT of ``timm`` by name (random weights: ``pretrained=False``, no download; dropout
    and drop-path off, as in timm's defaults). Raises ``ImportError`` where timm (or the
    torchvision it imports) does not import with the installed PyTorch."""
    import timm

    return timm.create_model(name, pretrained=False, img_size=image, **kw)


def vision_libraries() -> str | None:
    """Why torchvision and timm cannot be used here, or ``None`` where both import."""
    import importlib

    try:
        for lib in ("torchvision", "timm"):  # timm imports torchvision
            importlib.import_module(lib)
    except Exception as e:  # an ImportError, or a RuntimeError from a mismatched build
        return f"torchvision/timm do not import with torch {torch.__version__}: " \
               f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def build(name: str, seed: int = 0, **kw: Any) -> tuple[nn.Module, torch.Tensor]:
    """A model and an example input, by name (the keys of :data:`MODELS`)."""
    make, inp = MODELS[name]
    torch.manual_seed(seed)
    model = make(**kw)
    torch.manual_seed(seed + 1)
    return model, inp()


MODELS: dict[str, tuple[Any, Any]] = {
    "mlp": (MLP, lambda: torch.randn(64, 32)),
    "residual": (ResidualNet, lambda: torch.randn(4, 3, 16, 16)),
    "attention": (AttentionNet, lambda: torch.randint(0, 64, (4, 32))),
    "graph_break": (lambda **kw: AttentionNet(graph_break=True, **kw),
                    lambda: torch.randint(0, 64, (4, 32))),
    "gpt2": (gpt2, lambda: torch.randint(0, 256, (2, 64))),
    "resnet": (resnet, lambda: torch.randn(2, 3, 32, 32)),
    "vit": (vit, lambda: torch.randn(2, 3, 32, 32)),
}


# -- nn.Sequential models for the block-level executor (thrifty.torch.train_step) -------------
def resnet_like(channels: int = 16, blocks: int = 4, classes: int = 10, seed: int = 0) -> Any:
    """A small ResNet-style ``nn.Sequential``: stem, residual blocks, pooled linear head."""
    class Res(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(c))

        def forward(self, x: Any) -> Any:
            return torch.relu(x + self.body(x))

    torch.manual_seed(seed)
    return nn.Sequential(nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU()),
                         *[Res(channels) for _ in range(blocks)],
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                       nn.Linear(channels, classes)))


def transformer_like(dim: int = 32, heads: int = 4, layers: int = 4, seed: int = 0,
                     dropout: float = 0.1) -> Any:
    """A small pre-norm Transformer-style ``nn.Sequential`` (with dropout, to test RNG)."""
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                     nn.Linear(4 * dim, dim), nn.Dropout(dropout))

        def forward(self, x: Any) -> Any:
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, dim), *[Block() for _ in range(layers)],
                         nn.LayerNorm(dim))
