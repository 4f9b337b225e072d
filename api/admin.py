from django.contrib import admin
from django.http import HttpRequest

from api.models import ApiToken, IdempotencyKey, TenantPolicy


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are issued by `createtenant` or the admin API (shown once); here they are listed and
    can be revoked by setting revoked_at."""

    list_display = ("prefix", "name", "tenant", "user", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "digest", "tenant", "user", "created_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(TenantPolicy)
class TenantPolicyAdmin(admin.ModelAdmin):
    list_display = ("tenant", "queue_name", "updated_at")


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):
    list_display = ("tenant", "key", "workload_name", "created_at")
