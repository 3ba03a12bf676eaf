from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from lab.catalogue.models import CatalogueEntry, Workload


def catalogue(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "catalogue/catalogue.html",
        {
            "entries": CatalogueEntry.objects.filter(active=True),
            "workloads": Workload.objects.filter(active=True),
        },
    )
