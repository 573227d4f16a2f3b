"""Routes for operators: `/health` (503 while loading, no key) and `/metrics` (Prometheus text,
behind --metrics-key or the API keys)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from lookahead.server.deps import ServiceDep, authorize_metrics

router = APIRouter()


@router.get("/health")
async def health(service: ServiceDep) -> JSONResponse:
    if service.load_error is not None:
        return JSONResponse({"status": "error", "message": service.load_error}, 503)
    if not service.ready.is_set():
        return JSONResponse({"status": "loading"}, 503, {"Retry-After": "5"})
    return JSONResponse({"status": "ok", "model": service.config.model_id})


@router.get("/metrics", dependencies=[Depends(authorize_metrics)])
async def metrics(service: ServiceDep) -> Response:
    return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
