"""End-to-end tests: the real TensorBoard serves our logs, headless Chromium renders them."""
