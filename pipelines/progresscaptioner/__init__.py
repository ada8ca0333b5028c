"""ProgressCaptioner (Xue et al., "Progress-Aware Video Frame Captioning", CVPR 2025).

Its stages (frame sequences, progress-aware captioning, the progression and caption-matching
judges, keyframe selection, FrameCap training data and SFT/DPO training) land here.
"""
