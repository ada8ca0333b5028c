"""ShowHowTo (Soucek et al., "ShowHowTo: Generating Scene-Conditioned Step-by-Step Visual
Instructions", CVPR 2025), Sec. 3: mining image-text step sequences from narrated videos.

`filter_instructional` (is this transcript a how-to?), `extract_steps` (the LLM's steps with the
times of the narration lines that state them), `align_frames` (one frame per step, in temporal
order, by an exact order-preserving DP over frame-text scores), and `export` with
`export_writers` (the release's `prompts.json` + image-strip layout, or webdataset shards).
The generator of Sec. 4, DynamiCrafter as the release fine-tunes it, its files loading as they are:
`generator_unet` (the 3D U-Net), `generator_encoders` (OpenCLIP text and image tokens, the
Resampler), `generator_vae` (the autoencoder and its key map), `generator_model` (the parts under
the release's names, configs and files), `generator` (predict.py's sampling, train.py's loss),
`generator_data` (the dataset and prompt-file readers), `train_generator` (vi train showhowto),
`generate` (vi generate).
"""
