"""An ImageNet-style trainer built on devicekit."""
