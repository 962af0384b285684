"""The catalog through the JSON API (token or session auth, like runs.api). Models and datasets are shared
catalog entries; the runs listed with a model are only those the caller can see.

GET    /api/models/               the base models
POST   /api/models/               {"name", "path", "description"?}: register a folder under the model roots,
                                  checked like the models page (config, tokenizer, weights); 201
GET    /api/models/<id>/          one model, inspected now, with the caller's runs that used it
GET    /api/datasets/             every dataset version (?name= that name's versions in any case, every
                                  owner's, newest first; each names its "owner")
GET    /api/datasets/<id>/        one version, with the list of its dataset's versions (its owner's name)
DELETE /api/datasets/<id>/        delete one version (its creator or an administrator; 409 while a queued or
                                  running run reads it, with the reason); 204
"""

from __future__ import annotations

from typing import Any

from core.openapi import extend_schema, query_params
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.forms import ModelRegisterForm
from catalog.model_info import inspect_model
from catalog.model_views import runs_using_model
from catalog.models import BaseModel, Dataset, name_key
from catalog.paths import resolve
from catalog.removal import DeleteRefused, delete_dataset


def model_json(model: BaseModel) -> dict[str, Any]:
    return {
        "id": model.pk,
        "name": model.name,
        "path": model.path,
        "architecture": model.architecture,
        "parameters": model.parameter_count,
        "description": model.description,
        "created_at": model.created_at.isoformat(),
        "details": model.details,
    }


def dataset_json(dataset: Dataset) -> dict[str, Any]:
    return {
        "id": dataset.pk,
        "name": dataset.name,
        "version": dataset.version,
        "owner": dataset.created_by.get_username() if dataset.created_by else None,
        "format": dataset.format,
        "path": dataset.path,
        "val_path": dataset.val_path,
        "splits": dataset.splits,
        "row_count": dataset.row_count,
        "content_hash": dataset.content_hash,
        "files": dataset.files,
        "uploaded": dataset.uploaded,
        "description": dataset.description,
        "created_at": dataset.created_at.isoformat(),
    }


class ModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = BaseModel
        fields = ["id"]

    def to_representation(self, model: BaseModel) -> dict[str, Any]:
        return model_json(model)


class ModelRegisterSerializer(serializers.Serializer):
    """The body of POST /api/models/ (errors come back as {field: message})."""

    name = serializers.CharField(max_length=200, help_text="Unique in the catalog.")
    path = serializers.CharField(help_text="The model folder, inside one of DAPO_MODEL_ROOTS.")
    description = serializers.CharField(required=False, allow_blank=True)


class DatasetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Dataset
        fields = ["id"]

    def to_representation(self, dataset: Dataset) -> dict[str, Any]:
        return dataset_json(dataset)


class ModelList(generics.ListAPIView):
    serializer_class = ModelSerializer
    queryset = BaseModel.objects.all()

    @extend_schema(request=ModelRegisterSerializer, responses={201: ModelSerializer})
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            return Response({"detail": "the body must be a JSON object"}, status=status.HTTP_400_BAD_REQUEST)
        fields = {k: body.get(k) for k in ("name", "path", "description")}
        if any(v is not None and not isinstance(v, str) for v in fields.values()):
            errors = {
                k: "must be a string" for k, v in fields.items() if v is not None and not isinstance(v, str)
            }
            return Response({"detail": "invalid model", "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
        form = ModelRegisterForm({k: v or "" for k, v in fields.items()})
        if not form.is_valid():
            errors = {k: " ".join(str(m) for m in v) for k, v in form.errors.items()}
            return Response({"detail": "invalid model", "errors": errors}, status=status.HTTP_400_BAD_REQUEST)
        model = form.save(request.user)
        return Response(model_json(model), status=status.HTTP_201_CREATED)


class ModelDetail(APIView):
    serializer_class = ModelSerializer

    def get(self, request: Request, model_id: int) -> Response:
        model = get_object_or_404(BaseModel, pk=model_id)
        folder = resolve(model.path)
        out = model_json(model)
        out["present"] = folder.is_dir()
        if out["present"]:
            out["details"] = inspect_model(folder)
        out["runs"] = [
            {"id": r.pk, "name": r.name, "kind": r.kind, "status": r.status}
            for r in runs_using_model(model, request.user)[:500]
        ]
        return Response(out)


@extend_schema(
    parameters=query_params(
        name=(str, "Only the versions of datasets of this name (in any case, every owner's), newest first.")
    )
)
class DatasetList(generics.ListAPIView):
    serializer_class = DatasetSerializer

    def get_queryset(self) -> QuerySet[Dataset]:
        datasets = Dataset.objects.select_related("created_by")
        if name := self.request.query_params.get("name", "").replace("\x00", "").strip():
            datasets = datasets.filter(name_key=name_key(name))
        return datasets.order_by("name", "created_by_id", "-version")


class DatasetDetail(APIView):
    serializer_class = DatasetSerializer

    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = get_object_or_404(Dataset.objects.select_related("created_by"), pk=dataset_id)
        versions = [
            {
                "id": v.pk,
                "version": v.version,
                "content_hash": v.content_hash,
                "row_count": v.row_count,
                "created_at": v.created_at.isoformat(),
            }
            for v in dataset.versions()
        ]
        return Response({**dataset_json(dataset), "versions": versions})

    def delete(self, request: Request, dataset_id: int) -> Response:
        dataset = get_object_or_404(Dataset.objects.select_related("created_by"), pk=dataset_id)
        try:
            delete_dataset(dataset, request.user)
        except DeleteRefused as e:
            return Response({"detail": str(e)}, status=e.status)
        return Response(status=status.HTTP_204_NO_CONTENT)
