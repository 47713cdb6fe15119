"""A report page parsed into elements (html.parser, stdlib), so tests can check what is nested in what."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "br", "img", "hr", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None]
    parent: "Element | None" = None
    content: list["str | Element"] = field(default_factory=list)  # text and elements, in document order

    @property
    def children(self) -> list["Element"]:
        return [c for c in self.content if isinstance(c, Element)]

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        """All text inside, entities decoded (what a browser shows)."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.content)

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list["Element"]:
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and (cls is None or cls in child.classes) and all(
                child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()
            ):
                found.append(child)
            found += child.find_all(tag, cls, **attrs)
        return found

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> "Element":
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> in <{self.tag} {self.attrs}>"
        return found[0]

    def ancestors(self) -> list["Element"]:
        out, node = [], self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#document", {})

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs), parent=self.current)
        self.current.content.append(element)
        if tag not in VOID:
            self.current = element

    def handle_endtag(self, tag):  # the report closes every element it opens, in order
        assert tag == self.current.tag, f"</{tag}> closes <{self.current.tag} {self.current.attrs}>"
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.content.append(data)


def parse(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    assert builder.current is builder.root, f"<{builder.current.tag}> left open"
    return builder.root
