"""The geometry builders of the HuggingFace families :mod:`mosaic.arch.hf_import` reads, grouped
by the structure they share: dense transformers (:mod:`.dense`), every block MoE
(:mod:`.every_block_moe`), MoE blocks placed by a layer rule (:mod:`.interleaved_moe`),
DeepSeek-V3's blocks (:mod:`.deepseek`), DBRX's own field names (:mod:`.dbrx`) and hybrid
Mamba-2/DeltaNet/attention stacks (:mod:`.hybrid`)."""
