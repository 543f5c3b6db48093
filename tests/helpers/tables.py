"""Reading back a table llmlab prints (llmlab.tables.markdown_table), so a test checks its cells."""


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of a Markdown table, each a dict of its cells (padding stripped) by column."""
    header, _rule, *lines = text.splitlines()
    columns = [cell.strip() for cell in header.split("|")]
    return [dict(zip(columns, (cell.strip() for cell in line.split("|")), strict=True))
            for line in lines]
