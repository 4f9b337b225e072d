from django.apps import AppConfig


class SimConfig(AppConfig):
    name = "sim"
    default_auto_field = "django.db.models.BigAutoField"
