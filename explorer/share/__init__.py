"""What leaves or enters the server as files: model zips and upload quotas (uploads), the model card (card), the
Hugging Face Hub (hub).
"""
