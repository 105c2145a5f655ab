"""Table data: version folders and atomic publishing, and CREATE TABLE AS staging."""
