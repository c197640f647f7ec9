"""Settings of the export stage: whether the images travel with the dataset.

By default the images table holds paths on the build machine (small, but only useful there).
`embed_images` also writes the Hugging Face images config with the image bytes in a
`datasets.Image` column, so a copied or uploaded export still shows its images. The build report
(lenses_data.publish.report) is written at the end of the export.
"""

from __future__ import annotations

from pydantic import Field

from lenses_data.config.frozen import FrozenModel


class ExportConfig(FrozenModel):
    embed_images: bool = Field(
        False, description="Write the image bytes into the Hugging Face images config (hf/images/)"
    )
    embed_max_side: int | None = Field(
        None,
        ge=32,
        description="None: embed the original files' bytes; a number (e.g. 512): embed JPEGs re-encoded "
        "so that the longer side is at most this many pixels",
    )
    embed_jpeg_quality: int = Field(90, ge=1, le=100, description="JPEG quality of re-encoded images")
    shard_mb: float = Field(
        500.0, gt=0, description="Target size of one Parquet shard of the Hugging Face layout, in MB"
    )
    report_images: int = Field(
        200, ge=0, description="Images in the build report's gallery (export/report/index.html); 0: no report"
    )
    report_examples: int = Field(5, ge=0, description="Examples the build report shows per rejection reason")
    report_groups: int = Field(24, ge=0, description="Near-duplicate groups the build report shows")
