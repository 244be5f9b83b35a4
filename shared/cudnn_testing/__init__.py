"""Test helpers shared by every cudnn package (not shipped)."""
