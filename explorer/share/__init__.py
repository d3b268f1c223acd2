"""What leaves or enters the server as files: model zips (uploads), download links (downloads), the model card
(card), the Hugging Face Hub (hub). The web server's guards in front of Gradio (upload quotas, connection caps,
serving the links) are ui.web's.
"""
