"""The vit family's image side: which image corpora exist (sources, pure Python, read by the
sweep schema and the planner) and how they are loaded, split and batched (data). The model is
pipeline.model.VisionTransformer; its parameters and FLOPs are pipeline.vocab.flops's vit branch."""
