from django.apps import AppConfig


class KubeConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "kube"
    verbose_name = "Kubernetes adapter"
