"""Node images baked from the spec (``gpuforge image build``): see docs/images.md."""
