"""ProgressCaptioner's evaluation: FrameCapEval (progression detection and caption matching, Table 1 of
Xue et al., CVPR 2025) and the quality scripts on the project's samples and the release's real captions."""
