"""multiview_app: multi-view and multimodal representation learning."""
__version__ = "0.1.0"
