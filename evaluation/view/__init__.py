"""`vi view`: a static HTML report of any stage's records (kinds.py: what a record shows;
thumbs.py: thumbnails made once; report.py: the folder; assets/: the page)."""
