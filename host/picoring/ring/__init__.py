"""ring."""
