from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import include, path

from lab.api import views as api
from lab.catalogue.views import catalogue
from lab.experiments import views as experiments
from lab.runs import views as runs


@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


@login_not_required
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Where a browser asks on its own (a page without the icon link: JSON, a file)."""
    return HttpResponseRedirect(static("lab/favicon.svg"))


urlpatterns = [
    path("", experiments.experiment_list, name="experiment-list"),
    path("experiments/new/", experiments.experiment_new, name="experiment-new"),
    path("experiments/<int:pk>/", experiments.experiment_detail, name="experiment-detail"),
    path("experiments/<int:pk>/live/", experiments.experiment_live, name="experiment-live"),
    path("experiments/<int:pk>/cancel/", experiments.experiment_cancel, name="experiment-cancel"),
    path("experiments/<int:pk>/rerun/", experiments.experiment_rerun, name="experiment-rerun"),
    path("experiments/<int:pk>/export/", experiments.experiment_export, name="experiment-export"),
    path(
        "experiments/<int:pk>/files/<str:filename>",
        experiments.experiment_file,
        name="experiment-file",
    ),
    path("runs/<int:pk>/log/", runs.run_log, name="run-log"),
    path("runs/<int:pk>/cancel/", runs.run_cancel, name="run-cancel"),
    path("catalogue/", catalogue, name="catalogue"),
    path("hosts/", include("lab.hosts.urls")),
    path("", include("lab.reports.urls")),
    path("api/experiments/", api.experiments, name="api-experiments"),
    path("api/experiments/<int:pk>/", api.experiment, name="api-experiment"),
    path("api/experiments/<int:pk>/cancel/", api.experiment_cancel, name="api-experiment-cancel"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon, name="favicon"),
]
