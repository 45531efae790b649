# Frozen source program (a fixture of the main job): it finds the right paper with one batch
# read, then moves it to the wrong destination (the workspace root, not papers/).
import html
import re

root = "/workspace"
listing = list_directory(path=f"{root}/papers")
names = [line[len("[FILE] "):] for line in listing.splitlines() if line.startswith("[FILE] ")]
paths = [f"{root}/papers/{name}" for name in names if name.endswith(".html")]
texts = read_multiple_files(paths=paths).split("\n---\n")


def fits(text):
    authors = re.findall(r'name="citation_author"', text)
    date = re.search(r'name="citation_publication_date" content="(\d{4})', text)
    abstract = re.search(r'<p class="abstract">(.*?)</p>', text, re.DOTALL)
    words = set(re.findall(r"[a-z]+", html.unescape(abstract.group(1)).lower())) if abstract else set()
    return len(authors) == 1 and date and int(date.group(1)) >= 2019 and {"theorem", "prime"} <= words


found = [path for path, text in zip(paths, texts) if fits(text)]
print("the paper:", found)
move_file(source=found[0], destination=f"{root}/answer.html")
